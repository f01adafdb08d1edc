// What the DRA driver's unit tests share: a fresh folder per test with the driver's paths in it,
// the API server's claims as a test writes them, and a claim as kube-scheduler leaves it.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "agent/dra/driver.h"
#include "agent/dra/names.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "shim/mount_namespace_testing.h"

namespace tessera::agent::dra::testing {

using nlohmann::json;

// An empty folder of its own for the running test ("<prefix>-<pid>-<test name>" in the test
// temporary folder), and the driver options of node-a with its CDI specs, claims and checkpoint
// there and device nodes under /hostdev (the device lookup is the test's).
// Claims' ledger folders are tmpfs mounts: this process's own (a mount namespace of its own), gone
// with it; without the privilege, plain folders.
inline const bool kPrivateMounts = shim::EnterPrivateMountNamespace();

inline std::filesystem::path FreshTestDir(const std::string& prefix, DriverOptions* options) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      (prefix + "-" + std::to_string(getpid()) + "-" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  options->node_name = "node-a";
  options->cdi_dir = (dir / "cdi").string();
  options->claims_dir = (dir / "claims").string();
  options->checkpoint_path = (dir / "plugin/checkpoint.json").string();
  options->edits.dev_dir = "/hostdev";
  options->sized_ledger_folders = kPrivateMounts;
  return dir;
}

// The API server's claims as the test writes them; counts reads.
class FakeClaims : public ClaimSource {
 public:
  absl::StatusOr<json> GetClaim(const std::string& ns, const std::string& name) override {
    ++reads;
    auto it = claims.find(ns + "/" + name);
    if (it == claims.end()) return absl::NotFoundError("resourceclaims \"" + name + "\" not found");
    return it->second;
  }
  std::map<std::string, json> claims;
  int reads = 0;
};

// A claim or pod UID numbered n.
inline std::string Uid(int n) { return fmt::format("0e1c2a9e-0000-4000-8000-{:012d}", n); }

// A claim as kube-scheduler leaves it: allocated, reserved for a pod.
inline json Claim(const std::string& name, int uid, const std::vector<json>& results,
                  const std::string& node = "node-a") {
  json r = json::array();
  for (json result : results) {
    result["driver"] = std::string(kDriverName);
    if (!result.contains("pool")) result["pool"] = node;
    if (!result.contains("request")) result["request"] = "gpu";
    r.push_back(result);
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", Uid(uid)}}},
          {"status",
           {{"allocation", {{"devices", {{"results", r}}}}},
            {"reservedFor",
             {{{"resource", "pods"}, {"name", name + "-pod"}, {"uid", Uid(1000 + uid)}}}}}}};
}

}  // namespace tessera::agent::dra::testing
