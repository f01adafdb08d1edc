// The GPU check's driver-API program (scripts/gpu_shim/driver_check.cc), segment tool and the
// agent's per-GPU loop (agent_gpu_run.cc), run against the fake driver: every check they make on a
// real GPU passes here, through the shim.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

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

// agent_gpu_run over `pods` (pod dirs) on GPU 0 with the fake NVML for `seconds`, in the
// background; its document goes to `out_file`.
void StartAgentRun(const Node& node, const std::vector<std::string>& pods, int seconds,
                   const std::string& out_file) {
  std::string dirs;
  for (const std::string& pod : pods) dirs += " " + pod;
  int status = -1;
  Shell("env TESSERA_FAKE_GPU_MACHINE=" + node.machine() + " " + TESSERA_AGENT_GPU_RUN + " --gpu " +
            Node::Uuid(0) + " --nvml " + TESSERA_FAKE_NVML + " --seconds " +
            std::to_string(seconds) + dirs + " > " + out_file + " 2>&1 &",
        &status);
  ASSERT_EQ(status, 0);
}

// The document agent_gpu_run printed at its end (the last line of `out_file`); null if none came
// within 20 s.
nlohmann::json AgentRunDocument(const std::string& out_file) {
  nlohmann::json doc;
  for (int i = 0; i < 200 && doc.is_null(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(out_file);
    std::string line, last;
    while (std::getline(in, line)) last = line;
    if (last.find("\"steps\"") != std::string::npos) doc = nlohmann::json::parse(last);
  }
  return doc;
}

// The fake's record of the GPU time of `pid` on GPU 0 within [from, to).
double TruthSeconds(const Node& node, pid_t pid, int64_t from, int64_t to) {
  for (const auto& [p, busy] : fake::BusyByPid(node.machine_state(), 0, from, to)) {
    if (p == static_cast<uint32_t>(pid)) return busy / 1e9;
  }
  return 0;
}

// Issue 34's done-when: three pods share one GPU (memory shares, no compute caps), all three
// running throughout, and keep it busy 15%, 30% and 45% of each second in turn. Their shims
// measure what their work took (busy_meter.h) and the agent's loop splits the device's busy time
// by those reports (usage_meter.h): each pod's part of what was metered and its metered seconds
// are within 5% of its truth (the fake's record of its kernels). The reports (within 2%) and the
// device's figure (within 0.3%) do not cover the same time (a shim reports at its syncs, the record
// trails by up to a sample period); what an interval cannot pay is owed for three more. With a
// debt kept one interval only, the seconds were within 5% in 10 of 12 runs (-5.1% to +0.8%); with
// three, in 8 of 8 (-2.2% to +1.3%, loaded 2-core machine; usage_e2e_test does the same through
// kubelet pods).
TEST(GpuCheckTest, AgentLoopSplitsASharedGpuAmongThreePodsByTheirShims) {
  Node node;
  const std::vector<std::pair<std::string, int>> loads = {{"a", 150}, {"b", 300}, {"c", 450}};
  std::vector<std::string> pods;
  for (const auto& [name, load] : loads) {
    node.Share(name, 0, 1 * kGiB);
    pods.push_back(node.PodDir(name));
  }
  const std::string out_file = node.dir() + "/agent.json";
  StartAgentRun(node, pods, 6, out_file);
  std::vector<std::unique_ptr<Client>> apps;
  for (const auto& [name, load] : loads) {
    apps.push_back(std::make_unique<Client>(node, name));
    ASSERT_EQ(apps.back()->Do("init 0"), "ok");
  }
  // The meter's first read (250 ms after the start) only starts its clock.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const int64_t from = fake::MonoNs();
  // Three rounds of about a second: each pod `load` ms of 2 ms kernels (synced every 10), then
  // the next; 0.1 s idle.
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < loads.size(); ++i) {
      ASSERT_EQ(apps[i]->Do("spin 2000000 " + std::to_string(loads[i].second / 2) + " 10"), "ok");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int64_t to = fake::MonoNs();
  nlohmann::json doc = AgentRunDocument(out_file);
  ASSERT_FALSE(doc.is_null()) << "agent_gpu_run wrote no document to " << out_file;
  double metered = 0, truths = 0;
  std::vector<double> busy(loads.size()), truth(loads.size());
  for (size_t i = 0; i < loads.size(); ++i) {
    const nlohmann::json& p = doc["pods"][pods[i]];
    busy[i] = p["busy_s"].get<double>();
    truth[i] = TruthSeconds(node, apps[i]->pid(), from, to);
    std::printf("  %s: metered %.3f s, its shim reported %.3f s, truth %.3f s\n",
                loads[i].first.c_str(), busy[i], p["reported_s"].get<double>(), truth[i]);
    ASSERT_GT(truth[i], 0);
    EXPECT_NEAR(busy[i], truth[i], truth[i] * 0.05) << loads[i].first << ": " << doc["gpu"].dump();
    EXPECT_LE(busy[i], p["reported_s"].get<double>() + 1e-9) << loads[i].first;
    metered += busy[i];
    truths += truth[i];
  }
  for (size_t i = 0; i < loads.size(); ++i) {
    const double part = busy[i] / metered, truth_part = truth[i] / truths;
    std::printf("  %s: %.4f of what was metered, truth %.4f\n", loads[i].first.c_str(), part,
                truth_part);
    EXPECT_NEAR(part, truth_part, truth_part * 0.05) << loads[i].first;
  }
  std::printf("  GPU: busy %.3f s, unattributed %.3f s\n", doc["gpu"]["busy_s"].get<double>(),
              doc["gpu"]["unattributed_s"].get<double>());
  EXPECT_EQ(doc["gpu"]["rejected_reports"], 0);
  // The pods' sum and the unattributed time make the device's busy time.
  EXPECT_NEAR(metered + doc["gpu"]["unattributed_s"].get<double>(),
              doc["gpu"]["busy_s"].get<double>(), 1e-6);
}

// The same loads at once, as hard caps of 15%, 30% and 45% whose windows the controller sets.
// On the fake the controller widens each window to 1.25 times its cap (1.12 of the period in
// all), so the windows overlap and each pod's syncs also count neighbours' kernels queued before
// its own (busy_meter.h's error bound): the reports ran 8-33% over the truth, the smaller pods
// more, and after the scaling to the device's busy time the 15% pod was charged 5-21% over its
// truth and the 45% pod within 5% (bench/results/usage-gpu.md). Issue 34's 5% holds where pods
// do not contend (the test above), not here: this test checks what holds whatever the
// contention, and prints the figures.
TEST(GpuCheckTest, AgentLoopSplitsAGpuAmongThreeCappedPodsAtOnce) {
  Node node;
  const std::vector<std::pair<std::string, uint32_t>> caps = {
      {"p15", 150}, {"p30", 300}, {"p45", 450}};
  std::vector<std::string> pods;
  for (const auto& [name, cap] : caps) {
    node.Share(name, 0, 1 * kGiB, cap, ComputeMode::kHardCap, 64, 200'000);
    pods.push_back(node.PodDir(name));
  }
  std::vector<std::unique_ptr<Client>> apps;
  for (const auto& [name, cap] : caps) {
    apps.push_back(std::make_unique<Client>(node, name));
    ASSERT_EQ(apps.back()->Do("init 0"), "ok");
  }
  // `count` 2 ms kernels synced every 10 in each pod at once.
  auto spin_all = [&](const std::vector<int>& counts) {
    std::vector<std::thread> runs;
    std::vector<std::string> answers(caps.size());
    for (size_t i = 0; i < caps.size(); ++i) {
      runs.emplace_back([&, i] {
        answers[i] = apps[i]->Do("spin 2000000 " + std::to_string(counts[i]) + " 10");
      });
    }
    for (std::thread& t : runs) t.join();
    for (const std::string& a : answers) EXPECT_EQ(a, "ok");
  };
  // The first launches of pods that start together run interleaved (each gate admits probes
  // before it knows a launch's cost): each pod's first sync counts the others' probes too, some
  // 40 ms each here (busy_meter.h's error bound), which is 13% of the 15% pod's 0.3 s. That
  // start is before the agent's loop, whose first reading of the ledgers only sets where they
  // start: what is checked is the split in the steady state.
  spin_all({20, 20, 20});
  const std::string out_file = node.dir() + "/agent.json";
  StartAgentRun(node, pods, 7, out_file);
  // The meter's first read (250 ms after the start) only starts its clock.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const int64_t from = fake::MonoNs();
  // About 2 s each at its cap: 0.3, 0.6 and 0.9 s of GPU work.
  spin_all({150, 300, 450});
  const int64_t to = fake::MonoNs();
  nlohmann::json doc = AgentRunDocument(out_file);
  ASSERT_FALSE(doc.is_null()) << "agent_gpu_run wrote no document to " << out_file;
  double metered = 0, truths = 0;
  for (size_t i = 0; i < caps.size(); ++i) {
    const nlohmann::json& p = doc["pods"][pods[i]];
    const double busy_s = p["busy_s"].get<double>(), reported_s = p["reported_s"].get<double>();
    const double truth_s = TruthSeconds(node, apps[i]->pid(), from, to);
    std::printf("  %s: metered %.3f s, its shim reported %.3f s, truth %.3f s\n",
                caps[i].first.c_str(), busy_s, reported_s, truth_s);
    ASSERT_GT(truth_s, 0);
    EXPECT_GT(busy_s, 0);
    // Several pods running: none is charged more than it reported.
    EXPECT_LE(busy_s, reported_s + 1e-9) << caps[i].first;
    if (i > 0) {
      EXPECT_GT(busy_s, doc["pods"][pods[i - 1]]["busy_s"].get<double>()) << caps[i].first;
    }
    metered += busy_s;
    truths += truth_s;
  }
  std::printf("  GPU: busy %.3f s (truth %.3f s), unattributed %.3f s\n",
              doc["gpu"]["busy_s"].get<double>(), truths,
              doc["gpu"]["unattributed_s"].get<double>());
  EXPECT_EQ(doc["gpu"]["rejected_reports"], 0);
  // The pods' sum and the unattributed time make the device's busy time.
  EXPECT_NEAR(metered + doc["gpu"]["unattributed_s"].get<double>(),
              doc["gpu"]["busy_s"].get<double>(), 1e-6);
}

// A pod alone on its GPU (as a whole GPU's pod is) is charged the device's own figure, with
// nothing unattributed; its shim's report, unused then, agrees with the truth too.
TEST(GpuCheckTest, AgentLoopChargesAPodAloneTheDevicesFigures) {
  Node node;
  node.Share("whole", 0, 0);  // no caps: a shim that only measures
  const std::string pod = node.PodDir("whole");
  const std::string out_file = node.dir() + "/agent.json";
  StartAgentRun(node, {pod}, 4, out_file);
  Client app(node, "whole");
  ASSERT_EQ(app.Do("init 0"), "ok");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const int64_t from = fake::MonoNs();
  // 0.6 s of work in two bursts with an idle gap between (syncs that find the GPU idle).
  ASSERT_EQ(app.Do("spin 2000000 150 10"), "ok");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(app.Do("spin 2000000 150 10"), "ok");
  const int64_t to = fake::MonoNs();
  nlohmann::json doc = AgentRunDocument(out_file);
  ASSERT_FALSE(doc.is_null()) << "agent_gpu_run wrote no document to " << out_file;
  const nlohmann::json& p = doc["pods"][pod];
  const double busy_s = p["busy_s"].get<double>(), reported_s = p["reported_s"].get<double>();
  const double truth_s = TruthSeconds(node, app.pid(), from, to);
  std::printf("  metered %.3f s, its shim reported %.3f s, truth %.3f s\n", busy_s, reported_s,
              truth_s);
  EXPECT_EQ(busy_s, doc["gpu"]["busy_s"].get<double>());
  EXPECT_EQ(doc["gpu"]["unattributed_s"].get<double>(), 0.0);
  // The device's record in whole percents once a sixth of a second (as in the test above).
  EXPECT_NEAR(busy_s, truth_s, truth_s / 10);
  EXPECT_NEAR(reported_s, truth_s, truth_s * 0.05);
}

}  // namespace
}  // namespace tessera::shim::testing
