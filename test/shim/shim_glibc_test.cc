// The shim goes into container images with whatever glibc they have (glibc_compat.h): the built
// libraries need nothing newer than glibc 2.17 (CentOS 7, Ubuntu 14.04 and later), no
// libstdc++ from the image, and only libc, libdl, libgcc_s and their real driver library.
#include <cstdio>
#include <regex>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace {

std::string Run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  ::pclose(p);
  return out;
}

// "2.17" -> 2017, "2.2.5" -> 2002.
int GlibcVersion(const std::string& v) {
  int major = 0, minor = 0;
  std::sscanf(v.c_str(), "%d.%d", &major, &minor);
  return major * 1000 + minor;
}

void CheckLibrary(const std::string& path, const std::string& real) {
  if (Run("command -v objdump").empty()) GTEST_SKIP() << "objdump not installed";
  const std::string symbols = Run("objdump -T '" + path + "'");
  ASSERT_FALSE(symbols.empty()) << path;
  std::regex version(R"(\((GLIBC|GLIBCXX|CXXABI)_([0-9.]+)\))");
  int newest = 0;
  std::string newest_line;
  for (std::sregex_iterator it(symbols.begin(), symbols.end(), version), end; it != end; ++it) {
    EXPECT_EQ((*it)[1], "GLIBC") << path << " needs the image's C++ runtime: " << it->str();
    int v = GlibcVersion((*it)[2]);
    if (v > newest) {
      newest = v;
      newest_line = it->str();
    }
  }
  EXPECT_LE(newest, 2017) << path << " needs " << newest_line;
  const std::string dynamic = Run("readelf -d '" + path + "'");
  std::regex needed(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  std::set<std::string> libs;
  for (std::sregex_iterator it(dynamic.begin(), dynamic.end(), needed), end; it != end; ++it) {
    libs.insert((*it)[1]);
  }
  std::set<std::string> allowed = {real,        "libdl.so.2",           "libgcc_s.so.1",
                                   "libc.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"};
  for (const auto& lib : libs) EXPECT_TRUE(allowed.count(lib)) << path << " needs " << lib;
  EXPECT_TRUE(libs.count(real)) << path;
  EXPECT_TRUE(libs.count("libdl.so.2")) << path << ": dlopen@GLIBC_2.2.5 lives there before 2.34";
}

TEST(ShimLibraryTest, LoadsOnOldGlibc) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitized builds link the sanitizer runtimes and libstdc++ dynamically";
#endif
  CheckLibrary(TESSERA_SHIM_LIBRARY, "libtessera-real-cuda.so.1");
  CheckLibrary(TESSERA_SHIM_NVML_LIBRARY, "libtessera-real-nvml.so.1");
}

}  // namespace
