// The GPU check's comparison on real nvidia-smi texts: `nvidia-smi -q` of an 8 x H100 SXM HGX
// server (testdata/h100_sxm_x8_nvidia_smi_q.txt) with `nvidia-smi topo -m` of an 8 x H100 HGX
// server (core/topology/testdata/hgx_h100.txt; another machine of the same design), and the
// single H200's topo -m (core/topology/testdata/h200_1gpu_real.txt). The inventories are what the
// agent would print for those machines, written as GPU description files.
#include "agent/discovery/nvidia_smi_check.h"

#include <fstream>
#include <sstream>

#include "agent/discovery/fake_gpus_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::agent {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string H100Q() {
  return Read(std::string(TESSERA_SOURCE_DIR) +
              "/src/agent/discovery/testdata/h100_sxm_x8_nvidia_smi_q.txt");
}
std::string Topo(const std::string& name) {
  return Read(std::string(TESSERA_SOURCE_DIR) + "/src/core/topology/testdata/" + name);
}

// The 8 H100s as the agent finds them: UUIDs and bus ids of the -q text, NUMA and CPU affinity of
// the topo text, NV18 between every pair.
json H100Node() {
  const char* uuids[] = {
      "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1", "GPU-7c3cadbd-17e5-0913-f69b-c618122ea0cd",
      "GPU-2d50cdf6-dd67-9f2e-855e-0d4d6d395a2f", "GPU-d1838e76-90e6-4408-711d-aeeaa2e1fd14",
      "GPU-72be6e5d-3c1b-0d37-98ac-d3ef159f2589", "GPU-52378fbc-3124-3895-13b6-1dd179563e0f",
      "GPU-83a5aebb-b71c-c570-aa83-185e1233fe97", "GPU-33135771-a848-ece1-b61e-489e221d663c"};
  const char* buses[] = {"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"};
  json gpus = json::array();
  json links = json::array();
  for (int i = 0; i < 8; ++i) {
    gpus.push_back({{"index", i},
                    {"uuid", uuids[i]},
                    {"model", "H100-80GB"},
                    {"name", "NVIDIA H100 80GB HBM3"},
                    {"memory_mib", 81559},
                    {"pci_bus_id", std::string("00000000:") + buses[i] + ":00.0"},
                    {"numa_node", i / 4},
                    {"cpu_affinity", i < 4 ? "0-47,96-143" : "48-95,144-191"}});
    json row = json::array();
    for (int k = 0; k < 8; ++k) row.push_back(i == k ? "X" : "NV18");
    links.push_back(row);
  }
  return {{"version", 1}, {"gpus", gpus}, {"links", links}};
}

records::Inventory Inventory(const json& file) {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(file.dump(), "node.json");
  EXPECT_TRUE(node.ok()) << node.status();
  return node->ToInventory();
}

TEST(NvidiaSmiQ, ReadsTheRealText) {
  absl::StatusOr<SmiLog> log = ParseNvidiaSmiQ(H100Q());
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->driver_version, "565.57.01");
  EXPECT_EQ(log->cuda_version, "12.7");
  EXPECT_EQ(log->attached, 8);
  ASSERT_EQ(log->gpus.size(), 8u);
  const SmiGpu& g = log->gpus[7];
  EXPECT_EQ(g.bus_id, "00000000:DB:00.0");
  EXPECT_EQ(g.product_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g.uuid, "GPU-33135771-a848-ece1-b61e-489e221d663c");
  EXPECT_EQ(g.minor, "7");
  EXPECT_EQ(g.fb_total_mib, 81559);  // not BAR1's 131072 nor the protected memory's 0
  EXPECT_EQ(g.mig_current, "Disabled");
  EXPECT_EQ(g.fabric_state, "Completed");
  EXPECT_EQ(g.fabric_clique, "0");
  EXPECT_EQ(g.fabric_cluster, "00000000-0000-0000-0000-000000000000");
}

TEST(NvidiaSmiQ, ErrorsNameTheLine) {
  EXPECT_THAT(ParseNvidiaSmiQ("GPU0 X\n").status().message(),
              HasSubstr("nvidia-smi -q, line 1: expected the \"==============NVSMI LOG"));
  std::string text = H100Q();
  text.replace(text.find("    GPU UUID"), 12, "    GPU UUIX");
  EXPECT_THAT(ParseNvidiaSmiQ(text).status().message(),
              HasSubstr("line 11: GPU 00000000:18:00.0 has no \"GPU UUID\""));
  text = H100Q();
  text.replace(text.find("81559 MiB"), 9, "81559 GiB");
  EXPECT_THAT(ParseNvidiaSmiQ(text).status().message(),
              HasSubstr("FB Memory Usage / Total: \"81559 GiB\" is not \"<n> MiB\""));
  text = H100Q();
  text.replace(text.find(": 8\n"), 4, ": 9\n");
  EXPECT_THAT(ParseNvidiaSmiQ(text).status().message(),
              HasSubstr("\"Attached GPUs\" says 9 but 8 GPU blocks follow"));
}

TEST(NvidiaSmiCheck, AnAgentThatAgreesPassesEveryCheck) {
  absl::StatusOr<SmiLog> log = ParseNvidiaSmiQ(H100Q());
  ASSERT_TRUE(log.ok()) << log.status();
  absl::StatusOr<core::ParsedTopology> topo = core::ParseNvidiaSmiTopo(Topo("hgx_h100.txt"));
  ASSERT_TRUE(topo.ok()) << topo.status();
  CheckReport report = CompareWithNvidiaSmi(Inventory(H100Node()), *log, *topo);
  EXPECT_EQ(report.mismatches(), 0) << report.ToMarkdown();
  // 2 counts, 8 x (UUID, index, bus, memory, model, MIG) + 8 x (NUMA, affinity) + 28 pairs.
  EXPECT_EQ(report.items.size(), 2u + 8 * 6 + 8 * 2 + 28);
  EXPECT_THAT(report.ToMarkdown(), HasSubstr("| GPU 7 (00000000:DB:00.0) memory (MiB) | 81559 | "
                                             "81559 | ok |"));
  EXPECT_THAT(report.ToMarkdown(), HasSubstr("94 checks, 0 mismatches."));
}

TEST(NvidiaSmiCheck, EachDisagreementIsReported) {
  absl::StatusOr<SmiLog> log = ParseNvidiaSmiQ(H100Q());
  absl::StatusOr<core::ParsedTopology> topo = core::ParseNvidiaSmiTopo(Topo("hgx_h100.txt"));
  ASSERT_TRUE(log.ok() && topo.ok());
  auto mismatched = [&](const json& node) {
    std::vector<std::string> out;
    for (const CheckItem& i : CompareWithNvidiaSmi(Inventory(node), *log, *topo).items) {
      if (!i.ok) out.push_back(i.what + ": " + i.nvidia_smi + " / " + i.tessera);
    }
    return out;
  };
  json node = H100Node();
  node["gpus"][3]["memory_mib"] = 81920;
  EXPECT_THAT(mismatched(node),
              ::testing::ElementsAre("GPU 3 (00000000:5D:00.0) memory (MiB): 81559 / 81920"));

  node = H100Node();
  node["links"][2][5] = node["links"][5][2] = "NV12";
  EXPECT_THAT(mismatched(node), ::testing::ElementsAre("link GPU2-GPU5: NV18 / NV12"));

  node = H100Node();  // the agent numbered two GPUs the other way round
  std::swap(node["gpus"][0]["uuid"], node["gpus"][1]["uuid"]);
  EXPECT_THAT(mismatched(node),
              ::testing::ElementsAre("GPU 0 (00000000:18:00.0) index: 0 / 1",
                                     "GPU 0 (00000000:18:00.0) PCI bus id: 00000000:18:00.0 / "
                                     "00000000:2A:00.0",
                                     "GPU 1 (00000000:2A:00.0) index: 1 / 0",
                                     "GPU 1 (00000000:2A:00.0) PCI bus id: 00000000:2A:00.0 / "
                                     "00000000:18:00.0"));

  node = H100Node();  // a GPU the agent did not see
  node["gpus"].erase(7);
  node["links"].erase(7);
  for (json& row : node["links"]) row.erase(7);
  std::vector<std::string> missing = mismatched(node);
  EXPECT_THAT(missing, ::testing::Contains("GPU count (nvidia-smi -q): 8 / 7"));
  EXPECT_THAT(missing, ::testing::Contains("GPU count (nvidia-smi topo -m): 8 / 7"));
  EXPECT_THAT(missing, ::testing::Contains(
                           "GPU 7 (00000000:DB:00.0) UUID: GPU-33135771-a848-ece1-b61e-489e221d663c"
                           " / (not found)"));

  node = H100Node();
  node["gpus"][4]["numa_node"] = 0;
  node["gpus"][6]["cpu_affinity"] = "0-191";
  node["gpus"][1]["model"] = "H100-SXM";
  node["gpus"][2]["mig"] = {{"enabled", true}};
  EXPECT_THAT(mismatched(node),
              ::testing::ElementsAre(
                  "GPU 1 (00000000:2A:00.0) model: H100-80GB (NVIDIA H100 80GB HBM3) / H100-SXM "
                  "(NVIDIA H100 80GB HBM3)",
                  "GPU 2 (00000000:3A:00.0) MIG mode: disabled (Disabled) / enabled (Disabled)",
                  "GPU 4 NUMA node: 1 / 0", "GPU 6 CPU affinity: 48-95,144-191 / 0-191"));
}

TEST(NvidiaSmiCheck, SingleH200TopologyAsTheRealTextPrintsIt) {
  absl::StatusOr<core::ParsedTopology> topo = core::ParseNvidiaSmiTopo(Topo("h200_1gpu_real.txt"));
  ASSERT_TRUE(topo.ok()) << topo.status();
  json node = {{"version", 1},
               {"gpus",
                {{{"index", 0},
                  {"uuid", "GPU-00000000-1111-2222-3333-444444444444"},
                  {"model", "H200-141GB"},
                  {"memory_mib", 143771},
                  {"numa_node", 0},
                  {"cpu_affinity", "0-15"}}}}};
  CheckReport report = CompareWithNvidiaSmi(Inventory(node), SmiLog{}, *topo);
  std::vector<std::string> checked;
  for (const CheckItem& i : report.items) {
    // No -q text here: its count and the GPU it does not list are the only other items.
    if (i.what == "GPU count (nvidia-smi -q)" || i.what == "GPU 0 UUID (found by tessera)") {
      EXPECT_FALSE(i.ok);
      continue;
    }
    EXPECT_TRUE(i.ok) << i.what << ": " << i.nvidia_smi << " / " << i.tessera;
    checked.push_back(i.what);
  }
  EXPECT_THAT(checked, ::testing::ElementsAre("GPU count (nvidia-smi topo -m)", "GPU 0 NUMA node",
                                              "GPU 0 CPU affinity"));
  node["gpus"][0]["cpu_affinity"] = "0-7";
  EXPECT_EQ(CompareWithNvidiaSmi(Inventory(node), SmiLog{}, *topo).mismatches(), 3);
}

}  // namespace
}  // namespace tessera::agent
