// The host side of an uninstall (the API side: publish/advertisement_test.cc WithdrawNode, and
// the installed chart in test/helm/helm_install_e2e_test.cc).
#include "agent/uninstall.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shim/mount_namespace_testing.h"
#include "shim/segments.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

const bool kPrivateMounts = shim::EnterPrivateMountNamespace();

// The agent's folders go whole; of the CDI folder only tessera's specs; nothing else.
TEST(HostFootprint, RemovesWhatTheAgentMadeAndNothingElse) {
  const fs::path root = fs::path(::testing::TempDir()) / StrCat("tessera-uninstall-", getpid());
  fs::remove_all(root);
  fs::create_directories(root / "run/node-a/pods/uid-1");
  fs::create_directories(root / "run/node-b");
  std::ofstream(root / "run/node-b/other") << "another node's";
  std::ofstream(root / "run/node-a/pods/uid-1/assignment.json") << "{}";
  fs::create_directories(root / "run/node-a/lib");
  std::ofstream(root / "run/node-a/lib/libtessera-cuda.so") << "x";
  fs::create_directories(root / "cdi");
  std::ofstream(root / "cdi/k8s.gpu.tessera.dev-gpu_claim-1.json") << "{}";
  std::ofstream(root / "cdi/nvidia.yaml") << "kind: nvidia.com/gpu";
  std::ofstream(root / "reg.sock") << "";
  HostFootprint f;
  f.dirs = {(root / "run/node-a/pods").string(), (root / "run/node-a/lib").string(),
            (root / "run/node-a/mps").string()};  // never made: nothing to do
  f.cdi_dir = (root / "cdi").string();
  f.cdi_prefix = "k8s.gpu.tessera.dev-gpu_";
  f.files = {(root / "reg.sock").string()};
  std::vector<std::string> removed;
  ASSERT_TRUE(RemoveHostFootprint(f, &removed).ok());
  EXPECT_EQ(removed.size(), 5u) << StrJoin(removed, "\n");
  EXPECT_FALSE(fs::exists(root / "run/node-a")) << "left empty: removed";
  EXPECT_FALSE(fs::exists(root / "cdi/k8s.gpu.tessera.dev-gpu_claim-1.json"));
  EXPECT_TRUE(fs::exists(root / "cdi/nvidia.yaml")) << "another driver's spec stays";
  EXPECT_FALSE(fs::exists(root / "reg.sock"));
  EXPECT_TRUE(fs::exists(root / "run/node-b/other")) << "a folder with something else stays";
  fs::remove_all(root);
}

// A pod still running at the uninstall keeps its ledger folder as a tmpfs (shim/segments.h): it
// is unmounted and the pod's folder removed with the rest (before: the removal stopped at the
// mount point, "Device or resource busy", and the pods folder stayed).
TEST(HostFootprint, UnmountsAPodsSizedLedgerFolder) {
  if (!kPrivateMounts) GTEST_SKIP() << "needs CAP_SYS_ADMIN for a mount namespace";
  const fs::path root = fs::path(::testing::TempDir()) / StrCat("tessera-uninstall-mnt-", getpid());
  shim::RemoveTestTree(root);
  const fs::path pod = root / "run/node-a/pods/0b7e8f7c-2b7c-4f5e-9d2a-3c1d5e6f7a8b";
  fs::create_directories(pod);
  shim::SegmentOptions o;
  o.limits.memory_limit_bytes = 1 << 30;
  o.ledger_folder_bytes = shim::LedgerFolderBytes(1, o.slots);
  ASSERT_TRUE(shim::Segment::Create(pod.string(), "GPU-1", o).ok());
  struct stat folder {
  }, parent{};
  ASSERT_EQ(::stat((pod / "ledger").c_str(), &folder), 0);
  ASSERT_EQ(::stat(pod.c_str(), &parent), 0);
  ASSERT_NE(folder.st_dev, parent.st_dev) << "the ledger folder is a mount";
  HostFootprint f;
  f.dirs = {(root / "run/node-a/pods").string()};
  std::vector<std::string> removed;
  absl::Status s = RemoveHostFootprint(f, &removed);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(fs::exists(root / "run/node-a/pods"));
  shim::RemoveTestTree(root);
}

// A wrong flag never removes a system folder.
TEST(HostFootprint, RefusesShallowOrRelativeFolders) {
  for (const char* bad : {"/", "/run", "/run/", "run/tessera", "/run/../var"}) {
    HostFootprint f;
    f.dirs = {bad};
    std::vector<std::string> removed;
    EXPECT_FALSE(RemoveHostFootprint(f, &removed).ok()) << bad;
    EXPECT_TRUE(removed.empty());
  }
}

}  // namespace
}  // namespace tessera::agent
