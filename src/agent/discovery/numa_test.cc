#include "agent/discovery/numa.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

TEST(NumaTest, CpuLists) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::set<int32_t>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList(""), std::set<int32_t>{});
  for (const char* bad : {"3-1", "a", "1,", "-1", "0-99999999", "1--2"}) {
    EXPECT_EQ(ParseCpuList(bad), std::nullopt) << bad;
  }
}

// What the H200 VM showed: one node with every CPU, the PCI device without a node (-1), and
// nvidia-smi topo -m printing NUMA Affinity 0.
TEST(NumaTest, TheOneNodeWithTheGpusCpus) {
  EXPECT_EQ(NumaNodeOfCpus("0-15", {{0, "0-15"}}), 0);
  EXPECT_EQ(NumaNodeOfCpus("16-31", {{0, "0-15"}, {1, "16-31"}}), 1);
  EXPECT_EQ(NumaNodeOfCpus("8-11", {{0, "0-15"}, {1, "16-31"}}), 0);
}

TEST(NumaTest, NoGuessWhenTheAffinitySpansNodesOrNothingIsKnown) {
  EXPECT_EQ(NumaNodeOfCpus("0-31", {{0, "0-15"}, {1, "16-31"}}), -1);
  EXPECT_EQ(NumaNodeOfCpus("", {{0, "0-15"}}), -1);
  EXPECT_EQ(NumaNodeOfCpus("0-15", {}), -1);
  EXPECT_EQ(NumaNodeOfCpus("40-47", {{0, "0-15"}}), -1);
  EXPECT_EQ(NumaNodeOfCpus("0-15", {{0, "0-x"}}), -1);
}

TEST(NumaTest, ReadsTheNodesOfSysfs) {
  char tmpl[] = "/tmp/tessera-numa-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path root = tmpl;
  for (const auto& [node, list] : {std::pair{0, "0-7"}, std::pair{1, "8-15"}}) {
    const auto dir = root / "devices/system/node" / ("node" + std::to_string(node));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "cpulist") << list << "\n";
  }
  std::filesystem::create_directories(root / "devices/system/node/power");
  EXPECT_EQ(ReadNodeCpus(root.string()), (std::map<int32_t, std::string>{{0, "0-7"}, {1, "8-15"}}));
  EXPECT_TRUE(ReadNodeCpus((root / "missing").string()).empty());
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace tessera::agent
