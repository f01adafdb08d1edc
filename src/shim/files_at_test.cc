#include "shim/files_at.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "shim/bus_guard.h"

namespace tessera::shim {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FilesAtTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-files-at-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    victim_ = root_ + "/victim";
    std::ofstream(victim_) << "keep me";
    ASSERT_EQ(::chmod(victim_.c_str(), 0600), 0);
    ASSERT_EQ(::mkdir((root_ + "/victim-dir").c_str(), 0700), 0);
    std::ofstream(root_ + "/victim-dir/inside") << "keep me too";
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf '" + root_ + "'").c_str()), 0); }
  void ExpectVictimsUntouched() {
    EXPECT_EQ(Read(victim_), "keep me");
    struct stat st {};
    ASSERT_EQ(::stat(victim_.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(Read(root_ + "/victim-dir/inside"), "keep me too");
  }
  std::string root_, victim_;
};

TEST_F(FilesAtTest, MakeDirsAndOpenRefuseSymlinksAndForeignOwners) {
  absl::StatusOr<Fd> pod = MakeDirs(root_ + "/pods/uid-1", 0755);
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(::symlink((root_ + "/victim-dir").c_str(), (root_ + "/pods/uid-1/ledger").c_str()), 0);
  absl::StatusOr<Fd> ledger = MakeDirAt(pod->get(), "ledger", 0777, "ledger");
  EXPECT_EQ(ledger.status().code(), absl::StatusCode::kFailedPrecondition);
  struct stat st {};
  ASSERT_EQ(::stat((root_ + "/victim-dir").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // never chmodded through the symlink

  ASSERT_EQ(::symlink(victim_.c_str(), (root_ + "/pods/uid-1/file").c_str()), 0);
  EXPECT_EQ(OpenFileAt(pod->get(), "file", O_RDWR, "file").status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(::link(victim_.c_str(), (root_ + "/pods/uid-1/hard").c_str()), 0);
  EXPECT_EQ(OpenFileAt(pod->get(), "hard", O_RDWR, "hard").status().code(),
            absl::StatusCode::kFailedPrecondition);  // two links
  std::ofstream(root_ + "/pods/uid-1/foreign") << "x";
  ASSERT_EQ(::chown((root_ + "/pods/uid-1/foreign").c_str(), ::geteuid() + 1234, 0), 0);
  EXPECT_EQ(OpenFileAt(pod->get(), "foreign", O_RDONLY, "foreign").status().code(),
            absl::StatusCode::kFailedPrecondition);
  ExpectVictimsUntouched();
}

TEST_F(FilesAtTest, WriteFileAtReplacesAtomicallyAndIgnoresPlantedNames) {
  absl::StatusOr<Fd> dir = MakeDirs(root_ + "/pod", 0755);
  ASSERT_TRUE(dir.ok());
  // Whatever temporary names someone guesses, the write never goes through them.
  for (const char* name :
       {".assignment.json.tmp", ".assignment.json.tmp.1", "assignment.json.tmp"}) {
    ASSERT_EQ(::symlink(victim_.c_str(), (root_ + "/pod/" + name).c_str()), 0);
  }
  ASSERT_TRUE(WriteFileAt(dir->get(), "assignment.json", "{\"a\":1}", 0644, "a").ok());
  EXPECT_EQ(Read(root_ + "/pod/assignment.json"), "{\"a\":1}");
  ASSERT_TRUE(WriteFileAt(dir->get(), "assignment.json", "{\"a\":2}", 0644, "a").ok());
  EXPECT_EQ(Read(root_ + "/pod/assignment.json"), "{\"a\":2}");
  // A symlink in the final name's place is replaced, not written through.
  ASSERT_EQ(::unlink((root_ + "/pod/assignment.json").c_str()), 0);
  ASSERT_EQ(::symlink(victim_.c_str(), (root_ + "/pod/assignment.json").c_str()), 0);
  ASSERT_TRUE(WriteFileAt(dir->get(), "assignment.json", "{\"a\":3}", 0644, "a").ok());
  struct stat st {};
  ASSERT_EQ(::lstat((root_ + "/pod/assignment.json").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ExpectVictimsUntouched();
}

TEST_F(FilesAtTest, RemoveTreeRemovesSymlinksNotTheirTargets) {
  ASSERT_EQ(std::system(("mkdir -p '" + root_ + "/pod/ledger/deep/er'").c_str()), 0);
  std::ofstream(root_ + "/pod/ledger/deep/er/file") << "x";
  ASSERT_EQ(::symlink((root_ + "/victim-dir").c_str(), (root_ + "/pod/ledger/dir-link").c_str()),
            0);
  ASSERT_EQ(::symlink(victim_.c_str(), (root_ + "/pod/ledger/file-link").c_str()), 0);
  ASSERT_TRUE(RemoveTree(root_ + "/pod").ok());
  struct stat st {};
  EXPECT_NE(::lstat((root_ + "/pod").c_str(), &st), 0);
  ExpectVictimsUntouched();
  EXPECT_TRUE(RemoveTree(root_ + "/pod").ok());  // missing: fine
}

TEST(BusGuardTest, ATruncatedMappingEndsTheAccessNotTheProcess) {
  char tmpl[] = "/tmp/tessera-bus-XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 8192), 0);
  auto* map =
      static_cast<volatile char*>(::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(map, MAP_FAILED);
  int sum = 0;
  EXPECT_TRUE(RunCatchingBusErrors([&] { sum += map[4096]; }));
  ASSERT_EQ(::ftruncate(fd, 100), 0);
  const unsigned long before = BusErrorsCaught();
  EXPECT_FALSE(RunCatchingBusErrors([&] { sum += map[4096]; }));
  EXPECT_FALSE(RunCatchingBusErrors([&] { map[4096] = 1; }));  // again: the handler still works
  EXPECT_EQ(BusErrorsCaught(), before + 2);
  EXPECT_TRUE(RunCatchingBusErrors([&] { sum += map[10]; }));
  // Outside a guard a SIGBUS keeps its usual effect (under AddressSanitizer, which takes SIGBUS
  // for its own report: that report and exit status 1).
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_EXIT(
      {
        sum += map[4096];
        std::exit(sum == 12345 ? 3 : 0);
      },
      ::testing::ExitedWithCode(1), "AddressSanitizer: BUS");
#else
  EXPECT_EXIT(
      {
        sum += map[4096];
        std::exit(sum == 12345 ? 3 : 0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
#endif
  ::munmap(const_cast<char*>(map), 8192);
  ::close(fd);
  ::unlink(tmpl);
}

}  // namespace
}  // namespace tessera::shim
