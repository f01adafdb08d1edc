// `tessera agent` as a user runs it: --print-inventory from a GPU description file and from NVML
// (the fake libnvidia-ml.so.1, found by the dynamic loader through LD_LIBRARY_PATH), clear errors
// and exit statuses without a driver or with a broken file, and `agent compare` (the GPU check)
// on real nvidia-smi texts.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_tessera.h"

namespace {

using nlohmann::json;
using tessera::cli_testing::Output;
using tessera::cli_testing::TempFile;
using ::testing::HasSubstr;

Output Tessera(const std::string& args) {
  return tessera::cli_testing::RunTessera(args, tessera::cli_testing::Stderr::kMerged);
}

// Runs the binary with extra environment (`env` puts it before the program).
Output TesseraWithEnv(const std::string& env, const std::string& args) {
  Output r;
  const std::string cmd = "env " + env + " " + TESSERA_BINARY + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int s = pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  r.all = r.out;
  return r;
}

constexpr char kTwoGpus[] = R"({"version": 1,
 "gpus": [{"index": 0, "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000000", "model": "H100-80GB",
           "memory_mib": 81559, "numa_node": 0, "cpu_affinity": "0-55"},
          {"index": 1, "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000001", "model": "H100-80GB",
           "memory_mib": 81559, "numa_node": 1, "cpu_affinity": "56-111", "xid": [48]}],
 "links": [["X", "NV18"], ["NV18", "X"]]}
)";

TEST(AgentCli, PrintsTheInventoryOfADescriptionFile) {
  const std::string file = TempFile("agent_cli_gpus.json", kTwoGpus);
  Output r =
      tessera::cli_testing::RunTessera("agent --print-inventory --compact --gpus-file " + file,
                                       tessera::cli_testing::Stderr::kDiscarded);
  ASSERT_EQ(r.status, 0) << r.out;
  json doc = json::parse(r.out);
  EXPECT_EQ(doc["version"], 1);
  ASSERT_EQ(doc["gpus"].size(), 2u);
  EXPECT_EQ(doc["gpus"][1]["uuid"], "GPU-6f1c2a9e-0000-4000-8000-000000000001");
  EXPECT_EQ(doc["gpus"][1]["health"]["xids"], json::array({48}));
  EXPECT_FALSE(doc["gpus"][0].contains("health"));
  EXPECT_EQ(doc["links"][0][1], "NV18");
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1);  // one line
}

TEST(AgentCli, ABrokenFileNamesItsLineWithStatus2) {
  std::string text = kTwoGpus;
  text.replace(text.find("\"56-111\""), 8, "\"56-\"");
  const std::string file = TempFile("agent_cli_bad.json", text);
  Output r = Tessera("agent --print-inventory --gpus-file " + file);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("tessera agent: " + file +
                               ":5: gpus[1].cpu_affinity: \"56-\" is not a CPU list"));
  r = Tessera("agent --print-inventory --gpus-file /no/such/gpus.json");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("cannot read the GPU description file /no/such/gpus.json"));
}

TEST(AgentCli, WithoutTheDriverItSaysSoWithStatus1) {
  // No libnvidia-ml.so.1 anywhere the loader looks.
  Output r = TesseraWithEnv("LD_LIBRARY_PATH=/nonexistent", "agent --print-inventory");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("tessera agent: cannot load NVML (libnvidia-ml.so.1)"));
  EXPECT_THAT(r.out, HasSubstr("Is the NVIDIA driver installed?"));
  // A driver whose kernel module is not loaded.
  const std::string config = TempFile("agent_cli_nvml_unloaded.json", R"({"init_error": 9})");
  r = TesseraWithEnv(
      std::string("LD_LIBRARY_PATH=") + TESSERA_FAKE_NVML_DIR + " TESSERA_FAKE_NVML=" + config,
      "agent --print-inventory");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("nvmlInit failed: Driver Not Loaded (NVML error 9)"));
  // A driver with no GPU.
  const std::string none = TempFile("agent_cli_nvml_none.json", R"({"gpus": []})");
  r = TesseraWithEnv(
      std::string("LD_LIBRARY_PATH=") + TESSERA_FAKE_NVML_DIR + " TESSERA_FAKE_NVML=" + none,
      "agent --print-inventory");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("NVML reports no GPU on this node"));
}

TEST(AgentCli, PrintsWhatNvmlReports) {
  json gpus = json::array();
  for (int i = 0; i < 2; ++i) {
    gpus.push_back({{"uuid", "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i)},
                    {"name", "NVIDIA H100 80GB HBM3"},
                    {"memory_bytes", 81559ULL << 20},
                    {"pci_bus_id", i == 0 ? "00000000:18:00.0" : "00000000:2A:00.0"},
                    {"numa_node", i},
                    {"cpus", {i * 4, i * 4 + 1, i * 4 + 2, i * 4 + 3}},
                    {"nvlinks", std::vector<std::string>(18, "switch")}});
  }
  const std::string config =
      TempFile("agent_cli_nvml.json", json{{"gpus", gpus}, {"pcie", {{0, 50}, {50, 0}}}}.dump());
  Output r = TesseraWithEnv(
      std::string("LD_LIBRARY_PATH=") + TESSERA_FAKE_NVML_DIR + " TESSERA_FAKE_NVML=" + config,
      "agent --print-inventory");
  ASSERT_EQ(r.status, 0) << r.out;
  json doc = json::parse(r.out);
  ASSERT_EQ(doc["gpus"].size(), 2u);
  EXPECT_EQ(doc["gpus"][1]["model"], "H100-80GB");
  EXPECT_EQ(doc["gpus"][1]["memory_mib"], 81559);
  EXPECT_EQ(doc["gpus"][1]["pci_bus_id"], "00000000:2A:00.0");
  EXPECT_EQ(doc["gpus"][1]["cpu_affinity"], "4-7");
  EXPECT_EQ(doc["gpus"][1]["sm_count"], 132);
  EXPECT_EQ(doc["links"][1][0], "NV18");
}

TEST(AgentCli, CompareIsTheGpuCheck) {
  const std::string dir = std::string(TESSERA_SOURCE_DIR);
  const std::string q = dir + "/src/agent/discovery/testdata/h100_sxm_x8_nvidia_smi_q.txt";
  const std::string topo = dir + "/src/core/topology/testdata/hgx_h100.txt";
  const char* uuids[] = {
      "b42dd28e-ffdd-8720-1df0-98bd8cdc05b1", "7c3cadbd-17e5-0913-f69b-c618122ea0cd",
      "2d50cdf6-dd67-9f2e-855e-0d4d6d395a2f", "d1838e76-90e6-4408-711d-aeeaa2e1fd14",
      "72be6e5d-3c1b-0d37-98ac-d3ef159f2589", "52378fbc-3124-3895-13b6-1dd179563e0f",
      "83a5aebb-b71c-c570-aa83-185e1233fe97", "33135771-a848-ece1-b61e-489e221d663c"};
  const char* buses[] = {"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"};
  json gpus = json::array(), links = json::array();
  for (int i = 0; i < 8; ++i) {
    gpus.push_back({{"index", i},
                    {"uuid", std::string("GPU-") + uuids[i]},
                    {"model", "H100-80GB"},
                    {"memory_mib", 81559},
                    {"pci_bus_id", std::string("00000000:") + buses[i] + ":00.0"},
                    {"numa_node", i / 4},
                    {"cpu_affinity", i < 4 ? "0-47,96-143" : "48-95,144-191"}});
    json row = json::array();
    for (int k = 0; k < 8; ++k) row.push_back(i == k ? "X" : "NV18");
    links.push_back(row);
  }
  const std::string file = TempFile("agent_cli_h100.json",
                                    json{{"version", 1}, {"gpus", gpus}, {"links", links}}.dump());
  Output inv = tessera::cli_testing::RunTessera("agent --print-inventory --gpus-file " + file,
                                                tessera::cli_testing::Stderr::kDiscarded);
  ASSERT_EQ(inv.status, 0);
  const std::string inventory = TempFile("agent_cli_h100_inventory.json", inv.out);
  Output r = Tessera("agent compare --inventory " + inventory + " --nvidia-smi-q " + q +
                     " --nvidia-smi-topo " + topo);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("94 checks, 0 mismatches."));

  gpus[5]["memory_mib"] = 80000;
  const std::string wrong = TempFile("agent_cli_h100_wrong.json",
                                     json{{"version", 1}, {"gpus", gpus}, {"links", links}}.dump());
  inv = tessera::cli_testing::RunTessera("agent --print-inventory --gpus-file " + wrong,
                                         tessera::cli_testing::Stderr::kDiscarded);
  const std::string wrong_inventory = TempFile("agent_cli_h100_wrong_inventory.json", inv.out);
  r = Tessera("agent compare --inventory " + wrong_inventory + " --nvidia-smi-q " + q +
              " --nvidia-smi-topo " + topo);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("| GPU 5 (00000000:AB:00.0) memory (MiB) | 81559 | 80000 | "
                               "**MISMATCH** |"));
  EXPECT_THAT(r.out, HasSubstr("94 checks, 1 mismatches."));
  // The same as one JSON document (-o json), the status unchanged.
  r = Tessera("agent compare -o json --inventory " + wrong_inventory + " --nvidia-smi-q " + q +
              " --nvidia-smi-topo " + topo);
  EXPECT_EQ(r.status, 1);
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["checks"], 94);
  EXPECT_EQ(doc["mismatches"], 1);
  ASSERT_EQ(doc["items"].size(), 94u);
  int failed = 0;
  for (const json& item : doc["items"]) {
    if (item["ok"].get<bool>()) continue;
    ++failed;
    EXPECT_EQ(item["what"], "GPU 5 (00000000:AB:00.0) memory (MiB)");
    EXPECT_EQ(item["nvidiaSmi"], "81559");
    EXPECT_EQ(item["tessera"], "80000");
  }
  EXPECT_EQ(failed, 1);

  r = Tessera("agent compare --inventory " + inventory + " --nvidia-smi-q " + topo +
              " --nvidia-smi-topo " + topo);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("hgx_h100.txt: nvidia-smi -q, line 4: expected the"));
}

TEST(AgentCli, BadFlagsAreStatus2) {
  Output r = Tessera("agent --rediscover-interval 5 --gpus-file /dev/null");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--rediscover-interval: \"5\" is not a duration"));
  r = Tessera("agent --log-level loud");
  EXPECT_EQ(r.status, 2);
  // The node side's flags too, before any API server is looked for.
  r = Tessera("agent --idle-reclaim-below-priority high --gpus-file /dev/null --node-name n");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--idle-reclaim-below-priority takes a pod priority (an integer"));
  r = Tessera(
      "agent --gpu-idle-window 0 --idle-reclaim-below-priority 1 --gpus-file /dev/null "
      "--node-name n");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--idle-reclaim-below-priority needs the idle rule"));
  r = Tessera("agent --gpu-idle-window 2d --gpus-file /dev/null --node-name n");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("--gpu-idle-window: \"2d\" is not a duration"));
}

}  // namespace
