// The GPU check's driver-API program (scripts/gpu_shim/driver_check.cc), segment tool and the
// agent's per-GPU loop (agent_gpu_run.cc), run against the fake driver: every check they make on a
// real GPU passes here, through the shim.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "nlohmann/json.hpp"
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

// agent_gpu_run beside a pod capped at 30% that runs alone on its GPU: it resolves the pod's
// process to its host PID, steers the pod's window from the fake NVML's per-process figures, and
// its usage meter charges the pod the GPU time the fake recorded (the device's busy time, to the
// one pod running), with nothing unattributed.
TEST(GpuCheckTest, AgentLoopFindsStepsAndMetersAPodAlone) {
  Node node;
  node.Share("p30", 0, 1 * kGiB, 300, ComputeMode::kHardCap, 64, 200'000);
  const std::string pod = node.PodDir("p30");
  const std::string out_file = node.dir() + "/agent.json";
  int status = -1;
  Shell("env TESSERA_FAKE_GPU_MACHINE=" + node.machine() + " " + TESSERA_AGENT_GPU_RUN + " --gpu " +
            Node::Uuid(0) + " --nvml " + TESSERA_FAKE_NVML + " --seconds 5 " + pod + " > " +
            out_file + " 2>&1 &",
        &status);
  ASSERT_EQ(status, 0);
  Client app(node, "p30");
  ASSERT_EQ(app.Do("init 0"), "ok");
  // The meter's first read (250 ms after the start) only starts its clock.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const int64_t from = fake::MonoNs();
  ASSERT_EQ(app.Do("spin 2000000 300 10"), "ok");  // 0.6 s of GPU work: about 2 s at 30%
  const int64_t to = fake::MonoNs();
  uint64_t truth_ns = 0;
  for (const auto& [p, busy] : fake::BusyByPid(node.machine_state(), 0, from, to)) {
    if (p == static_cast<uint32_t>(app.pid())) truth_ns = busy;
  }
  ASSERT_GT(truth_ns, 0u);
  // The run ends by itself (--seconds 5); its document is the last line.
  nlohmann::json doc;
  for (int i = 0; i < 100 && doc.is_null(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(out_file);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    if (last.find("\"steps\"") != std::string::npos) doc = nlohmann::json::parse(last);
  }
  ASSERT_FALSE(doc.is_null()) << "agent_gpu_run wrote no document to " << out_file;
  const nlohmann::json& p = doc["pods"][pod];
  EXPECT_GE(doc["steps"].get<int>(), 15);
  EXPECT_EQ(doc["untrusted_steps"], 0);
  EXPECT_EQ(p["host_pids"], nlohmann::json::array({app.pid()})) << doc.dump();
  int named = 0;  // steps in which NVML's per-process answer named the pod's process
  for (const auto& step : doc["nvml"]) named += step.contains(std::to_string(app.pid()));
  EXPECT_GE(named, 4) << doc["nvml"].dump();
  const int64_t duty = p["last_duty_permille"].get<int64_t>();
  EXPECT_GE(duty, 240);
  EXPECT_LE(duty, 375);
  // The meter reads the driver's record of the device's utilisation once a second (the fake's:
  // a sample per 1/6 s, in whole percent): within a tenth of the truth.
  const double busy_s = p["busy_s"].get<double>(), truth_s = truth_ns / 1e9;
  std::printf(
      "  steps %d, NVML named the pod in %d, last duty %lld, metered %.3f s, truth %.3f s\n",
      doc["steps"].get<int>(), named, static_cast<long long>(duty), busy_s, truth_s);
  EXPECT_NEAR(busy_s, truth_s, truth_s / 10) << doc["gpu"].dump();
  EXPECT_EQ(doc["gpu"]["unattributed_s"].get<double>(), 0.0);
  EXPECT_GE(doc["gpu"]["busy_s"].get<double>(), busy_s);
}

}  // namespace
}  // namespace tessera::shim::testing
