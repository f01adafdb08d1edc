// The GPU check's driver-API program (scripts/gpu_shim/driver_check.cc) and segment tool, run
// against the fake driver: every check it makes on a real GPU passes here, through the shim.
#include <cstdio>

#include "shim_testing.h"

namespace tessera::shim::testing {
namespace {

std::string Shell(const std::string& command, int* status) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

TEST(GpuCheckTest, DriverChecksPassThroughTheShim) {
  Node node;
  const std::string pod = node.PodDir("pod");
  int status = -1;
  Shell(std::string(TESSERA_GPU_SEGMENT_TOOL) + " create " + pod + " " + Node::Uuid(0) + " " +
            std::to_string(1 * kGiB),
        &status);
  ASSERT_EQ(status, 0);
  const std::string env = "env LD_LIBRARY_PATH=" + node.lib_dir(true) +
                          " TESSERA_FAKE_GPU_MACHINE=" + node.machine() +
                          " TESSERA_SHIM_ROOT=" + pod + " ";
  std::string out = Shell(env + TESSERA_GPU_DRIVER_CHECK + " " + pod, &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("\"failed\":0"), std::string::npos) << out;
  EXPECT_NE(out.find("\"cap\":1073741824"), std::string::npos) << out;
  for (const char* check : {"reports_the_share",
                            "pitch",
                            "array3d",
                            "mipmapped_array",
                            "vmm_device",
                            "vmm_host",
                            "vmm_host_numa",
                            "pool_default",
                            "pool_from_pool",
                            "out_of_memory",
                            "free_minus_256MiB_fits",
                            "free_plus_256MiB_refused",
                            "cuGetProcAddress_12000",
                            "cuGetProcAddress_13000",
                            "ipc_not_counted_twice",
                            "cuGetProcAddress_every_hooked_symbol",
                            "vmm_export_tagged",
                            "vmm_export_import_release",
                            "graph_allocations",
                            "context_heap_limit",
                            "ipc_free_while_opened",
                            "cuda2_allocators_refused"}) {
    EXPECT_NE(out.find(std::string("\"name\":\"") + check + "\",\"pass\":true"), std::string::npos)
        << check << ": " << out;
  }
  std::string inspect = Shell(
      std::string(TESSERA_GPU_SEGMENT_TOOL) + " inspect " + pod + " " + Node::Uuid(0), &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(inspect.rfind("{\"used\":0,", 0), 0u) << inspect;
  // Without the shim the same program fails its checks: they measure the shim.
  out = Shell("env LD_LIBRARY_PATH=" + node.lib_dir(false) + " TESSERA_FAKE_GPU_MACHINE=" +
                  node.machine() + " " + TESSERA_GPU_DRIVER_CHECK + " " + pod,
              &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("\"name\":\"reports_the_share\",\"pass\":true"), std::string::npos) << out;
  EXPECT_NE(out.find("\"name\":\"pitch\",\"pass\":false"), std::string::npos) << out;
  EXPECT_NE(out.find("\"name\":\"cuGetProcAddress_13000\",\"pass\":false"), std::string::npos)
      << out;
}

TEST(GpuCheckTest, SegmentToolSchedulesAndReaps) {
  Node node;
  const std::string pod = node.PodDir("pod");
  const std::string tool = TESSERA_GPU_SEGMENT_TOOL;
  int status = -1;
  Shell(tool + " create " + pod + " " + Node::Uuid(0) + " 0 300 hard 100000", &status);
  ASSERT_EQ(status, 0);
  Shell(tool + " schedule " + pod + " " + Node::Uuid(0) + " 300 500", &status);
  ASSERT_EQ(status, 0);
  auto seg = Segment::Open(pod, Node::Uuid(0));
  ASSERT_TRUE(seg.ok()) << seg.status();
  SegmentInfo info = (*seg)->Inspect();
  EXPECT_EQ(info.limits.compute_limit_permille, 300u);
  EXPECT_EQ(info.limits.period_us, 100000u);
  EXPECT_EQ(info.duty_permille, 300u);
  EXPECT_EQ(info.phase_permille, 500u);
  std::string reaped = Shell(tool + " reap " + pod + " " + Node::Uuid(0), &status);
  EXPECT_EQ(reaped, "{\"slots\":0,\"bytes\":0}\n");
  Shell(tool + " create " + pod + " " + Node::Uuid(0) + " 0", &status);
  EXPECT_NE(status, 0);  // exists
}

}  // namespace
}  // namespace tessera::shim::testing
