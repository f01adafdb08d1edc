// Every way an application reaches the driver is intercepted: linked with -lcuda, dlopen +
// dlsym, cuGetProcAddress (v1 and v2) at CUDA 11.8, 12.0, 12.8 and 13.0 with both stream
// flags, also when the driver's cuGetProcAddress answers with internal entry points that dlsym
// never returns, and Python's ctypes. Each case runs a real process through the real dynamic
// loader.
#include <cstdio>
#include <sstream>

#include "shim_testing.h"

namespace tessera::shim::testing {
namespace {

// The fake driver's cuGetProcAddress hands out internal entry points (as a real driver may):
// pointers the shim has never seen.
const char kInternalEntryPoints[] = "TESSERA_FAKE_CUDA_INTERNAL_ENTRY_POINTS=1";

struct Case {
  LoadMode mode;
  bool ptsz;
  bool internal = false;  // the driver answers cuGetProcAddress with internal entry points
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.mode.name << (c.internal ? " (internal entry points)" : "");
}

class LoaderMatrixTest : public ::testing::TestWithParam<Case> {};

TEST_P(LoaderMatrixTest, CapIsEnforcedAndReportedThroughThisLoadingPath) {
  const Case& c = GetParam();
  Node node;
  node.Share("pod", 0, 1 * kGiB);
  std::vector<std::string> env;
  if (c.internal) env.push_back(kInternalEntryPoints);
  Client app(node, "pod", /*shim=*/true, c.mode, env);
  ASSERT_EQ(app.Do("init"), "ok");
  // The device is the share.
  EXPECT_EQ(app.Values("totalmem"), (std::vector<uint64_t>{1 * kGiB}));
  EXPECT_EQ(app.Values("meminfo"), (std::vector<uint64_t>{1 * kGiB, 1 * kGiB}));
  ASSERT_EQ(app.Do("alloc a 629145600"), "ok");     // 600 MiB
  EXPECT_EQ(app.Do("alloc b 629145600"), "err 2");  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(app.Values("meminfo"), (std::vector<uint64_t>{424 * kMiB, 1 * kGiB}));
  EXPECT_EQ(app.Values("nvmlmem"), (std::vector<uint64_t>{600 * kMiB, 424 * kMiB, 1 * kGiB}));
  // The pointers this program calls are the shim's, of exactly the variant it asked for.
  EXPECT_EQ(app.Do("hookname cuMemAlloc"), "ok cuMemAlloc_v2");
  EXPECT_EQ(app.Do("hookname cuMemGetInfo"), "ok cuMemGetInfo_v2");
  EXPECT_EQ(app.Do("hookname cuLaunchKernel"),
            c.ptsz ? "ok cuLaunchKernel_ptsz" : "ok cuLaunchKernel");
  EXPECT_EQ(app.Do("hookname cuMemAllocAsync"),
            c.ptsz ? "ok cuMemAllocAsync_ptsz" : "ok cuMemAllocAsync");
  EXPECT_EQ(app.Do("hookname cuGraphLaunch"),
            c.ptsz ? "ok cuGraphLaunch_ptsz" : "ok cuGraphLaunch");
  EXPECT_EQ(app.Do("hookname cuMemCreate"), "ok cuMemCreate");
  ASSERT_EQ(app.Do("async x 104857600"), "ok");  // through the (ptsz) stream-ordered path
  EXPECT_EQ(app.Do("async y 419430400"), "err 2");
  ASSERT_EQ(app.Do("asyncfree x"), "ok");
  ASSERT_EQ(app.Do("free a"), "ok");
  ASSERT_EQ(app.Do("sync"), "ok");
  EXPECT_EQ(app.Values("meminfo"), (std::vector<uint64_t>{1 * kGiB, 1 * kGiB}));
  ASSERT_EQ(app.Do("spin 1000 10 0"), "ok");
  ASSERT_EQ(app.Do("graph 1000 3 2"), "ok");
}

INSTANTIATE_TEST_SUITE_P(Paths, LoaderMatrixTest,
                         ::testing::Values(Case{LoadMode::Linked(), false},
                                           Case{LoadMode::Dlopen(), false},
                                           Case{LoadMode::ProcAddress(11080, false), false},
                                           Case{LoadMode::ProcAddress(11080, true), true},
                                           Case{LoadMode::ProcAddress(12000, false), false},
                                           Case{LoadMode::ProcAddress(12000, true), true},
                                           Case{LoadMode::ProcAddress(12080, false), false},
                                           Case{LoadMode::ProcAddress(12080, true), true},
                                           Case{LoadMode::ProcAddress(13000, false), false},
                                           Case{LoadMode::ProcAddress(13000, true), true},
                                           Case{LoadMode::ProcAddress(11080, false), false, true},
                                           Case{LoadMode::ProcAddress(12000, true), true, true},
                                           Case{LoadMode::ProcAddress(12080, false), false, true},
                                           Case{LoadMode::ProcAddress(13000, true), true, true}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           std::string n = param.param.mode.name;
                           if (param.param.internal) n += "-internal";
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// For every symbol the shim hooks, at every version and flag, through both cuGetProcAddress
// APIs: the shim returns its hook for exactly the variant the driver returns, or fails the same
// way (symbol not found, version not sufficient).
void ExpectExactVariants(bool internal) {
  Node node;
  node.Share("pod", 0, 1 * kGiB);
  std::vector<std::string> env;
  if (internal) env.push_back(kInternalEntryPoints);
  Client app(node, "pod", /*shim=*/true, LoadMode::Dlopen(), env);
  ASSERT_EQ(app.Do("init"), "ok");
  std::string line = app.Do("procmatrix");
  while (line.rfind("ok", 0) != 0 && line != "(client exited)") {
    EXPECT_EQ(line.rfind("match", 0), 0u) << line;
    line = app.ReadLine();
  }
  // The final line: ok <checked> <mismatches> <hooked>.
  std::istringstream in(line.substr(3));
  int checked = 0, mismatches = 0, hooked = 0;
  in >> checked >> mismatches >> hooked;
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(checked, 500);
  EXPECT_GT(hooked, checked / 2);
}

TEST(LoaderTest, CuGetProcAddressResolvesTheExactVariantAtEveryVersionAndFlag) {
  ExpectExactVariants(/*internal=*/false);
}

// The attack: a driver (or a tenant's interposer in front of it) whose cuGetProcAddress returns
// entry points the shim cannot recognise by address. Every symbol the shim intercepts still
// resolves to its hook for exactly the variant asked for, never to the unknown pointer.
TEST(LoaderTest, UnknownEntryPointsFromCuGetProcAddressAreReplacedByTheHook) {
  ExpectExactVariants(/*internal=*/true);
}

// A variant of an intercepted symbol older than the shim's hooks (cuCtxDestroy before CUDA 4.0)
// would bypass the shim: on a shared GPU it is refused, whatever pointer the driver returned.
// Without a share nothing is enforced, and the driver's answer stands.
TEST(LoaderTest, AVariantOlderThanTheShimsHooksIsRefusedOnASharedGpu) {
  for (bool internal : {false, true}) {
    Node node;
    node.Share("pod", 0, 1 * kGiB);
    std::vector<std::string> env;
    if (internal) env.push_back(kInternalEntryPoints);
    Client app(node, "pod", /*shim=*/true, LoadMode::Dlopen(), env);
    ASSERT_EQ(app.Do("init"), "ok");
    EXPECT_EQ(app.Do("procaddr cuCtxDestroy 3000"), "err 500 2");  // NOT_FOUND, version
    EXPECT_EQ(app.Do("procaddr cuCtxDestroy 4000"), "ok cuCtxDestroy_v2");
    EXPECT_EQ(app.Do("procaddr cuMemAlloc 12000"), "ok cuMemAlloc_v2");
    // CUDA 2.x's cuMemAlloc: its own hook, which refuses to allocate on a shared GPU.
    EXPECT_EQ(app.Do("procaddr cuMemAlloc 3000"), "ok cuMemAlloc");
    EXPECT_EQ(app.Do("procaddr cuMemAllocAsync 12000 ptsz"), "ok cuMemAllocAsync_ptsz");
    EXPECT_EQ(app.Do("procaddr cuMemsetD8 12000"), "ok -");  // not intercepted: the driver's
  }
  Node unshared;
  Client app(unshared, "pod", /*shim=*/true);
  ASSERT_EQ(app.Do("init"), "ok");
  EXPECT_EQ(app.Do("procaddr cuCtxDestroy 3000"), "ok -");
}

// Without the shim the same program sees the whole fake GPU: the tests above measure the shim.
TEST(LoaderTest, TheFakeDriverAloneIsNotCapped) {
  Node node;
  node.Share("pod", 0, 1 * kGiB);
  Client app(node, "pod", /*shim=*/false);
  ASSERT_EQ(app.Do("init"), "ok");
  EXPECT_EQ(app.Values("totalmem"), (std::vector<uint64_t>{80 * kGiB}));
  EXPECT_EQ(app.Do("alloc a 2147483648"), "ok");
  EXPECT_EQ(app.Do("hookname cuMemAlloc"), "ok -");
}

// A GPU without a limits file is passed through untouched, next to a shared one; GPUs are
// matched by UUID, so CUDA_VISIBLE_DEVICES reordering them changes nothing.
TEST(LoaderTest, OnlySharedGpusAreCappedWhateverTheirOrdinal) {
  Node node(2);
  node.Share("pod", 1, 1 * kGiB);
  Client app(node, "pod", true, LoadMode::Dlopen(),
             {"CUDA_VISIBLE_DEVICES=" + Node::Uuid(1) + "," + Node::Uuid(0)});
  ASSERT_EQ(app.Do("init 0"), "ok");  // ordinal 0 is GPU 1, the shared one
  EXPECT_EQ(app.Values("totalmem"), (std::vector<uint64_t>{1 * kGiB}));
  EXPECT_EQ(app.Do("alloc a 2147483648"), "err 2");
  Client other(node, "pod", true, LoadMode::Dlopen(),
               {"CUDA_VISIBLE_DEVICES=" + Node::Uuid(1) + "," + Node::Uuid(0)});
  ASSERT_EQ(other.Do("init 1"), "ok");  // ordinal 1 is GPU 0: not shared
  EXPECT_EQ(other.Values("totalmem"), (std::vector<uint64_t>{80 * kGiB}));
  EXPECT_EQ(other.Do("alloc a 2147483648"), "ok");
}

// Python's ctypes is dlopen + dlsym with a handle: the shim sees it too.
TEST(LoaderTest, PythonCtypes) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitized shim cannot load into an unsanitized python";
#endif
  if (std::system("python3 -c 'import ctypes' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 not available";
  }
  Node node;
  node.Share("pod", 0, 1 * kGiB);
  std::string script = node.dir() + "/ctypes_check.py";
  FILE* f = std::fopen(script.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(
      "import ctypes\n"
      "cuda = ctypes.CDLL('libcuda.so.1')\n"
      "assert cuda.cuInit(0) == 0\n"
      "dev = ctypes.c_int(); ctx = ctypes.c_void_p()\n"
      "assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0\n"
      "assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0\n"
      "assert cuda.cuCtxSetCurrent(ctx) == 0\n"
      "free, total = ctypes.c_size_t(), ctypes.c_size_t()\n"
      "assert cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0\n"
      "ptr = ctypes.c_uint64()\n"
      "over = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(2 << 30))\n"
      "under = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(512 << 20))\n"
      "print(total.value, free.value, over, under)\n",
      f);
  std::fclose(f);
  std::string cmd = "env -i LD_LIBRARY_PATH=" + node.lib_dir(true) +
                    " TESSERA_FAKE_GPU_MACHINE=" + node.machine() +
                    " TESSERA_SHIM_ROOT=" + node.PodDir("pod") + " python3 " + script;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256] = {};
  ASSERT_NE(std::fgets(buf, sizeof(buf), p), nullptr);
  EXPECT_EQ(::pclose(p), 0);
  EXPECT_EQ(std::string(buf), "1073741824 1073741824 2 0\n");
}

}  // namespace
}  // namespace tessera::shim::testing
