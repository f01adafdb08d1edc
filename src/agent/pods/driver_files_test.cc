#include "agent/pods/driver_files.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class DriverFilesTest : public ::testing::Test {
 protected:
  DriverFilesTest() {
    dir_ = fs::path(::testing::TempDir()) / "driver_files_test";
    fs::remove_all(dir_);
    // The host as the agent's container sees it under <dir>/host: the driver in /usr/lib64 with
    // its usual links (an absolute one for NVML), the shim in the agent's image.
    host_ = dir_ / "host";
    fs::create_directories(host_ / "usr/lib64");
    Write(host_ / "usr/lib64/libcuda.so.580.95.05", "cuda");
    fs::create_symlink("libcuda.so.580.95.05", host_ / "usr/lib64/libcuda.so.1");
    Write(host_ / "usr/lib64/libnvidia-ml.so.580.95.05", "nvml");
    fs::create_symlink("/usr/lib64/libnvidia-ml.so.580.95.05",
                       host_ / "usr/lib64/libnvidia-ml.so.1");
    Write(host_ / "usr/lib64/libnvidia-ptxjitcompiler.so.580.95.05", "ptx");
    fs::create_symlink("libnvidia-ptxjitcompiler.so.580.95.05",
                       host_ / "usr/lib64/libnvidia-ptxjitcompiler.so.1");
    fs::create_directories(dir_ / "image/lib/tessera");
    Write(dir_ / "image/lib/tessera/libtessera-cuda.so", "shim-cuda v1");
    Write(dir_ / "image/lib/tessera/libtessera-nvml.so", "shim-nvml v1");
    options_.host_root = host_.string();
    options_.driver_lib_dirs = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64"};
    options_.shim_dir = (dir_ / "image/lib/tessera").string();
    options_.install_dir = (dir_ / "run/lib").string();
  }
  ~DriverFilesTest() override { fs::remove_all(dir_); }

  static void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  }

  fs::path dir_, host_;
  DriverFilesOptions options_;
};

TEST_F(DriverFilesTest, FindsTheDriverByHostPathsAndInstallsTheShim) {
  std::vector<std::string> notes;
  absl::StatusOr<DriverLibraries> d = PrepareDriverLibraries(options_, &notes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(notes.empty()) << notes.front();
  // Host paths (what the runtime mounts), links followed inside the host root.
  EXPECT_EQ(d->cuda, (LibraryFile{"/usr/lib64/libcuda.so.580.95.05", "libcuda.so.1"}));
  EXPECT_EQ(d->nvml, (LibraryFile{"/usr/lib64/libnvidia-ml.so.580.95.05", "libnvidia-ml.so.1"}));
  ASSERT_EQ(d->others.size(), 1u);
  EXPECT_EQ(d->others[0].host_path, "/usr/lib64/libnvidia-ptxjitcompiler.so.580.95.05");
  EXPECT_EQ(d->shim_cuda, options_.install_dir + "/libtessera-cuda.so");
  EXPECT_EQ(Read(d->shim_cuda), "shim-cuda v1");
  EXPECT_EQ(Read(d->shim_nvml), "shim-nvml v1");

  // Again with the same shim: the installed file is left alone (running containers map it).
  struct stat before {};
  ASSERT_EQ(::stat(d->shim_cuda.c_str(), &before), 0);
  ASSERT_TRUE(PrepareDriverLibraries(options_, &notes).ok());
  struct stat same {};
  ASSERT_EQ(::stat(d->shim_cuda.c_str(), &same), 0);
  EXPECT_EQ(same.st_ino, before.st_ino);
  // A new shim replaces it by rename: a new file, the old one intact for whoever maps it.
  Write(dir_ / "image/lib/tessera/libtessera-cuda.so", "shim-cuda v2");
  ASSERT_TRUE(PrepareDriverLibraries(options_, &notes).ok());
  struct stat after {};
  ASSERT_EQ(::stat(d->shim_cuda.c_str(), &after), 0);
  EXPECT_NE(after.st_ino, before.st_ino);
  EXPECT_EQ(Read(d->shim_cuda), "shim-cuda v2");
}

TEST_F(DriverFilesTest, WhatIsMissingIsSaidAndLeftEmpty) {
  fs::remove(host_ / "usr/lib64/libnvidia-ml.so.580.95.05");  // a dangling link now
  fs::remove(dir_ / "image/lib/tessera/libtessera-nvml.so");
  std::vector<std::string> notes;
  absl::StatusOr<DriverLibraries> d = PrepareDriverLibraries(options_, &notes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->cuda.host_path, "/usr/lib64/libcuda.so.580.95.05");
  EXPECT_EQ(d->nvml.host_path, "");
  EXPECT_EQ(d->shim_cuda, "");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_THAT(notes[0], HasSubstr("libnvidia-ml.so.1 is not in /usr/lib/x86_64-linux-gnu, "
                                  "/usr/lib64 (under " +
                                  host_.string() + ")"));
  EXPECT_THAT(notes[1], HasSubstr("the CUDA shim is not in"));
}

TEST_F(DriverFilesTest, ResolveHostPathStaysInsideTheHostRoot) {
  EXPECT_EQ(*ResolveHostPath(host_.string(), "/usr/lib64/libnvidia-ml.so.1"),
            "/usr/lib64/libnvidia-ml.so.580.95.05");
  fs::create_symlink("loop", host_ / "usr/lib64/loop");
  EXPECT_THAT(ResolveHostPath(host_.string(), "/usr/lib64/loop").status().message(),
              HasSubstr("too many levels of symbolic links"));
  EXPECT_EQ(ResolveHostPath(host_.string(), "/usr/lib64/nothing").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::agent
