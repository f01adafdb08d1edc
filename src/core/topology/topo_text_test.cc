#include "core/topology/topo_text.h"

#include <fstream>
#include <sstream>

#include "core/model/profiles.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using ::testing::HasSubstr;

std::string ReadTestdata(const std::string& name) {
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/src/core/topology/testdata/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ParsedTopology ParseOk(const std::string& text) {
  absl::StatusOr<ParsedTopology> t = ParseNvidiaSmiTopo(text);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : ParsedTopology{};
}

std::string Links(const LinkMatrix& m) {
  std::string out;
  for (int i = 0; i < m.size(); ++i) {
    for (int j = 0; j < m.size(); ++j)
      out += LinkName(m.at(i, j)) + (j + 1 < m.size() ? " " : "\n");
  }
  return out;
}

std::vector<std::string> NicLinks(const NicSpec& nic) {
  std::vector<std::string> out;
  for (const Link& l : nic.gpu_links) out.push_back(LinkName(l));
  return out;
}

TEST(TopoText, DgxA100TabSeparatedWithNicRowsAndLegend) {
  ParsedTopology t = ParseOk(ReadTestdata("dgx_a100.txt"));
  ASSERT_EQ(t.gpus.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(LinkName(t.links.at(i, j)), i == j ? "X" : "NV12") << i << "," << j;
    }
  }
  std::vector<int> numa;
  for (const GpuSpec& g : t.gpus) numa.push_back(g.numa_node);
  EXPECT_EQ(numa, (std::vector<int>{3, 3, 1, 1, 7, 7, 5, 5}));
  EXPECT_EQ(t.gpus[0].cpu_affinity, "48-63,176-191");
  EXPECT_EQ(t.gpus[4].cpu_affinity, "112-127,240-255");
  ASSERT_EQ(t.nics.size(), 10u);
  EXPECT_EQ(t.nics[0].name, "NIC0");
  EXPECT_EQ(t.nics[0].device, "mlx5_0");
  EXPECT_EQ(t.nics[9].device, "mlx5_9");
  EXPECT_EQ(NicLinks(t.nics[2]),
            (std::vector<std::string>{"SYS", "SYS", "PXB", "PXB", "SYS", "SYS", "SYS", "SYS"}));
  EXPECT_EQ(NicLinks(t.nics[8]), std::vector<std::string>(8, "SYS"));
}

TEST(TopoText, HgxH100SpaceAlignedWithGpuNumaId) {
  ParsedTopology t = ParseOk(ReadTestdata("hgx_h100.txt"));
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(LinkName(t.links.at(0, 7)), "NV18");
  EXPECT_EQ(LinkName(t.links.at(3, 4)), "NV18");
  for (int g = 0; g < 8; ++g) EXPECT_EQ(t.gpus[g].numa_node, g < 4 ? 0 : 1);
  EXPECT_EQ(t.gpus[5].cpu_affinity, "48-95,144-191");
  ASSERT_EQ(t.nics.size(), 8u);
  EXPECT_EQ(NicLinks(t.nics[5]),
            (std::vector<std::string>{"SYS", "SYS", "SYS", "SYS", "NODE", "PIX", "NODE", "NODE"}));
  EXPECT_EQ(t.nics[7].device, "mlx5_7");
}

TEST(TopoText, PcieTwoSocketOlderFormatWithMlx5Column) {
  ParsedTopology t = ParseOk(ReadTestdata("pcie_2socket_mlx5.txt"));
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(Links(t.links),
            "X PIX PXB PXB SYS SYS SYS SYS\n"
            "PIX X PXB PXB SYS SYS SYS SYS\n"
            "PXB PXB X PIX SYS SYS SYS SYS\n"
            "PXB PXB PIX X SYS SYS SYS SYS\n"
            "SYS SYS SYS SYS X PIX PXB PXB\n"
            "SYS SYS SYS SYS PIX X PXB PXB\n"
            "SYS SYS SYS SYS PXB PXB X PIX\n"
            "SYS SYS SYS SYS PXB PXB PIX X\n");
  EXPECT_EQ(t.gpus[0].numa_node, -1);  // no NUMA Affinity column in this driver's output
  EXPECT_EQ(t.gpus[7].cpu_affinity, "14-27");
  ASSERT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.nics[0].name, "mlx5_0");
  EXPECT_EQ(t.nics[0].device, "mlx5_0");
  EXPECT_EQ(NicLinks(t.nics[0]),
            (std::vector<std::string>{"SYS", "SYS", "SYS", "SYS", "PHB", "PHB", "PHB", "PHB"}));
}

TEST(TopoText, PcieTwoSocketAllSysWithEmptyCellBeforeGpuNumaId) {
  ParsedTopology t = ParseOk(ReadTestdata("pcie_4090_2socket.txt"));
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(LinkName(t.links.at(0, 1)), "SYS");
  EXPECT_EQ(t.gpus[3].numa_node, 0);
  EXPECT_EQ(t.gpus[4].numa_node, 1);
  ASSERT_EQ(t.nics.size(), 2u);
  EXPECT_EQ(t.nics[1].device, "");  // this paste has no NIC legend
  EXPECT_EQ(LinkName(t.nics[0].gpu_links[6]), "PHB");
}

// Byte for byte what `nvidia-smi topo -m` printed on a lent one-GPU H200 VM (2026-11-30): an
// ANSI-underlined header even into a file, a GPU NUMA ID column, and an empty cell before it.
TEST(TopoText, RealOneGpuH200WithAnsiHeaderAndEmptyCell) {
  ParsedTopology t = ParseOk(ReadTestdata("h200_1gpu_real.txt"));
  ASSERT_EQ(t.gpus.size(), 1u);
  EXPECT_EQ(t.links.size(), 1);
  EXPECT_EQ(t.gpus[0].cpu_affinity, "0-15");
  EXPECT_EQ(t.gpus[0].numa_node, 0);
  EXPECT_TRUE(t.nics.empty());
}

TEST(TopoText, BuiltInProfilesReproduceTheRealSamples) {
  struct Case {
    const char* file;
    const char* profile;
  };
  for (const Case& c : {Case{"dgx_a100.txt", "dgx-a100"}, Case{"hgx_h100.txt", "hgx-h100"},
                        Case{"l40s_4gpu.txt", "l40s-4gpu"}}) {
    ParsedTopology t = ParseOk(ReadTestdata(c.file));
    absl::StatusOr<Profile> p = FindProfile(c.profile);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(Links(t.links), Links(p->links)) << c.profile;
    ASSERT_EQ(t.gpus.size(), p->gpus.size()) << c.profile;
    for (size_t g = 0; g < t.gpus.size(); ++g) {
      EXPECT_EQ(t.gpus[g].numa_node, p->gpus[g].numa_node) << c.profile << " GPU" << g;
    }
    ASSERT_EQ(t.nics.size(), p->nics.size()) << c.profile;
    for (size_t n = 0; n < t.nics.size(); ++n) {
      EXPECT_EQ(NicLinks(t.nics[n]), NicLinks(p->nics[n])) << c.profile << " NIC" << n;
      EXPECT_EQ(t.nics[n].device, p->nics[n].device) << c.profile << " NIC" << n;
    }
  }
  // The DGX A100's CPU lists are the sample's too.
  ParsedTopology dgx = ParseOk(ReadTestdata("dgx_a100.txt"));
  absl::StatusOr<Profile> p = FindProfile("dgx-a100");
  for (size_t g = 0; g < 8; ++g) EXPECT_EQ(dgx.gpus[g].cpu_affinity, p->gpus[g].cpu_affinity);
}

TEST(TopoText, AnsiUnderlinedHeaderCrlfAndPreSysNames) {
  std::string text =
      "\x1b[4m\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\x1b[0m\r\n"
      "GPU0\t X \tNV4\tSOC\t0-9\t0\r\n"
      "GPU1\tNV4\t X \tSOC\t0-9\t0\r\n"
      "GPU2\tSOC\tSOC\t X \t10-19\t1\r\n";
  ParsedTopology t = ParseOk(text);
  ASSERT_EQ(t.gpus.size(), 3u);
  EXPECT_EQ(LinkName(t.links.at(0, 1)), "NV4");
  EXPECT_EQ(LinkName(t.links.at(1, 2)), "SYS");
  EXPECT_EQ(t.gpus[2].numa_node, 1);
}

TEST(TopoText, NumaListsAndNaAreUnknown) {
  ParsedTopology t = ParseOk(
      "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
      "GPU0\t X \tPHB\tN/A\t0-1\n"
      "GPU1\tPHB\t X \t0-63\tN/A\n");
  EXPECT_EQ(t.gpus[0].numa_node, -1);
  EXPECT_EQ(t.gpus[0].cpu_affinity, "");
  EXPECT_EQ(t.gpus[1].numa_node, -1);
  EXPECT_EQ(t.gpus[1].cpu_affinity, "0-63");
}

// Each malformed text, and where the error must point.
struct Bad {
  const char* what;
  std::string text;
  const char* expected;
};

TEST(TopoText, ErrorsNameLineAndColumn) {
  const std::string head = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\n";
  const std::vector<Bad> cases = {
      {"empty", "", "line 1, column 1: no header row"},
      {"only comments", "# nothing\n\n", "line 1, column 1: no header row"},
      {"header without GPU0", "GPU1\tGPU0\n", "line 1, column 1: expected GPU0 here"},
      {"header starts elsewhere", "CPU Affinity\tGPU0\n",
       "line 1, column 1: expected the header row to start with GPU0"},
      {"GPU after device", "\tGPU0\tNIC0\tGPU1\n",
       "line 1, column 12: expected a device or affinity column here, found \"GPU1\""},
      {"column after affinity", "\tGPU0\tCPU Affinity\tNIC0\n",
       "line 1, column 20: unexpected column \"NIC0\" after the affinity columns"},
      {"unknown link", head + "GPU0\t X \tNVX\tPIX\t0-9\nGPU1\tNV2\t X \tPIX\t0-9\n",
       "line 2, column 10: unknown link \"NVX\""},
      {"X off diagonal", head + "GPU0\t X \t X \tPIX\t0-9\n",
       "line 2, column 11: X off the diagonal (row GPU0, column GPU1)"},
      {"no X on diagonal", head + "GPU0\tNV2\tNV2\tPIX\t0-9\n",
       "line 2, column 6: expected X where row GPU0 meets its own column, found \"NV2\""},
      {"short row", head + "GPU0\t X \tNV2\n",
       "line 2, column 13: row GPU0 ends after 2 cells; expected 3 link cells"},
      {"missing affinity", head + "GPU0\t X \tNV2\tPIX\n",
       "line 2, column 17: row GPU0 has 0 affinity values, expected 1 (CPU Affinity)"},
      {"extra cell", head + "GPU0\t X \tNV2\tPIX\t0-9\t7\n",
       "line 2, column 22: unexpected cell \"7\""},
      {"bad affinity", head + "GPU0\t X \tNV2\tPIX\tzero\n",
       "line 2, column 18: CPU Affinity \"zero\" is not N/A or a list of numbers"},
      {"unknown row", head + "GPU0\t X \tNV2\tPIX\t0-9\nmlx5_0\tPIX\tPIX\t X \n",
       "line 3, column 1: expected a row of a GPU or of a device column (GPU0.., NIC0), found "
       "\"mlx5_0\""},
      {"GPU beyond header", head + "GPU2\t X \tNV2\tPIX\t0-9\n",
       "line 2, column 1: GPU2 has no column in the header (GPU0..GPU1)"},
      {"row twice", head + "GPU0\t X \tNV2\tPIX\t0-9\nGPU0\t X \tNV2\tPIX\t0-9\n",
       "line 3, column 1: GPU0 has a row already, on line 2"},
      {"missing row", head + "GPU0\t X \tNV2\tPIX\t0-9\n", "line 1, column 7: no row for GPU1"},
      {"asymmetric", head + "GPU0\t X \tNV2\tPIX\t0-9\nGPU1\tNV4\t X \tPIX\t0-9\n",
       "line 3, column 6: GPU1 to GPU0 is NV4 but GPU0 to GPU1 is NV2 (the matrix must be "
       "symmetric)"},
      {"NIC row disagrees",
       head + "GPU0\t X \tNV2\tPIX\t0-9\nGPU1\tNV2\t X \tSYS\t0-9\nNIC0\tPIX\tPIX\t X \n",
       "line 4, column 10: NIC0 to GPU1 is PIX but GPU1 to NIC0 is SYS"},
      {"garbage between rows", head + "GPU0\t X \tNV2\tPIX\t0-9\nhello\n",
       "line 3, column 1: expected a row of a GPU or of a device column"},
  };
  for (const Bad& b : cases) {
    absl::StatusOr<ParsedTopology> t = ParseNvidiaSmiTopo(b.text);
    ASSERT_FALSE(t.ok()) << b.what;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(b.expected)) << b.what;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("nvidia-smi topo text, line "))
        << b.what;
  }
}

TEST(TopoText, TooManyGpus) {
  std::string header;
  for (int g = 0; g <= kMaxGpusPerNode; ++g) header += "\tGPU" + std::to_string(g);
  absl::StatusOr<ParsedTopology> t = ParseNvidiaSmiTopo(header + "\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("more than 64 GPUs"));
}

}  // namespace
}  // namespace tessera::core
