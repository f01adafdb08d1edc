#include "sim/trace/alibaba.h"

#include "core/model/cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/trace/csv.h"

namespace tessera::sim {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(Csv, QuotesCarriageReturnsAndBlankLines) {
  absl::StatusOr<CsvTable> t =
      CsvTable::Parse("a,b\r\n\"x,1\",\"say \"\"hi\"\"\"\r\n\n3,4\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->rows().size(), 2u);
  EXPECT_EQ(t->rows()[0].cells[0], "x,1");
  EXPECT_EQ(t->rows()[0].cells[1], "say \"hi\"");
  EXPECT_EQ(t->rows()[1].line, 4);
  EXPECT_EQ(t->rows()[1].cells[1], "4");
}

TEST(Csv, ErrorsNameFileAndLine) {
  EXPECT_THAT(Message(CsvTable::Parse("", "e.csv").status()),
              HasSubstr("e.csv: the file is empty"));
  EXPECT_THAT(Message(CsvTable::Parse("\n\n", "e.csv").status()), HasSubstr("empty"));
  EXPECT_THAT(Message(CsvTable::Parse("a,b\n1\n", "e.csv").status()),
              HasSubstr("e.csv:2: 1 cells, but the header has 2 columns"));
  EXPECT_THAT(Message(CsvTable::Parse("a,b\n\"1,2\n", "e.csv").status()),
              HasSubstr("e.csv:2: a quoted cell is never closed"));
  EXPECT_THAT(Message(CsvTable::Parse("a,a\n", "e.csv").status()), HasSubstr("appears twice"));
}

constexpr char kNodes[] =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,64000,262144,2,P100\n"
    "n1,96000,393216,8,G2\n"
    "c0,32000,131072,0,\n";

TEST(AlibabaNodes, ReadsNodesWithModelMemory) {
  absl::StatusOr<std::vector<core::NodeSpec>> nodes = ParseAlibabaNodes(kNodes, "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].gpu_count(), 2);
  EXPECT_EQ((*nodes)[0].gpus[1].model, "P100");
  EXPECT_EQ((*nodes)[0].gpus[1].memory_mib, 16280);
  EXPECT_EQ((*nodes)[1].gpus[0].memory_mib, 32768);
  EXPECT_EQ((*nodes)[1].cpu_milli, 96000);
  EXPECT_EQ((*nodes)[2].gpu_count(), 0);
  EXPECT_TRUE(core::Cluster::Create(*nodes).ok());
}

TEST(AlibabaNodes, BadInputSaysWhereAndWhat) {
  EXPECT_THAT(Message(ParseAlibabaNodes("sn,cpu_milli,gpu,model\nn,1,1,T4\n", "n.csv").status()),
              HasSubstr("n.csv:1: missing column memory_mib"));
  EXPECT_THAT(
      Message(
          ParseAlibabaNodes("sn,cpu_milli,memory_mib,gpu,model\nn,1x,1,1,T4\n", "n.csv").status()),
      HasSubstr("n.csv:2: column cpu_milli: \"1x\" is not an integer"));
  EXPECT_THAT(
      Message(ParseAlibabaNodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n", "n.csv").status()),
      HasSubstr("n.csv:2: column model: the node has 2 GPUs but no model"));
  EXPECT_THAT(
      Message(
          ParseAlibabaNodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,99,T4\n", "n.csv").status()),
      HasSubstr("column gpu: 99 is out of range [0, 64]"));
  EXPECT_THAT(Message(ParseAlibabaNodes("sn,cpu_milli,memory_mib,gpu,model\n", "n.csv").status()),
              HasSubstr("n.csv: no nodes"));
  EXPECT_THAT(Message(ParseAlibabaNodes(
                          "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,T4\nn,1,1,1,T4\n", "n.csv")
                          .status()),
              HasSubstr("n.csv:3: column sn: node n already appears on line 2"));
}

constexpr char kPods[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,12000,16384,1,1000,,LS,Running,0,100,0\n"
    "p1,6000,12288,1,460,V100M16||V100M32,LS,Running,5,50,\n"
    "p2,88000,327680,8,1000,,LS,Running,7,70,7\n"
    "p3,4000,8192,0,0,,BE,Running,9,90,9\n"
    "p4,1000,1024,1,1500,,BE,Running,9,90,9\n";

TEST(AlibabaPods, ReadsElevenColumns) {
  absl::StatusOr<PodTrace> t = ParseAlibabaPods(kPods, "pods.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->pods.size(), 5u);
  EXPECT_TRUE(t->has_times);
  const TracePod& share = t->pods[1];
  EXPECT_EQ(share.gpu_milli, 460);
  EXPECT_EQ(share.gpu_models, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ(share.gpu_spec(), "V100M16|V100M32");
  EXPECT_FALSE(share.scheduled_time.has_value());
  EXPECT_EQ(*share.deletion_time, 50);
  EXPECT_EQ(t->pods[2].total_gpu_milli(), 8000);
  EXPECT_EQ(t->pods[4].gpu_milli, 1000) << "gpu_milli above 1000 reads as one GPU";

  core::PodRequest whole = ToPodRequest(t->pods[0], "x");
  EXPECT_EQ(whole.gpu.kind, core::GpuAsk::Kind::kWhole);
  EXPECT_EQ(whole.gpu.count, 1);
  core::PodRequest frac = ToPodRequest(share, "y");
  EXPECT_EQ(frac.gpu.kind, core::GpuAsk::Kind::kFraction);
  EXPECT_EQ(frac.gpu.fraction_milli, 460);
  EXPECT_EQ(frac.gpu_models.size(), 2u);
  EXPECT_EQ(ToPodRequest(t->pods[3], "z").gpu.kind, core::GpuAsk::Kind::kNone);
  EXPECT_EQ(frac.cpu_milli, 6000);
  EXPECT_EQ(frac.memory_mib, 12288);
}

TEST(AlibabaPods, ReadsFiveColumns) {
  absl::StatusOr<PodTrace> t = ParseAlibabaPods(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,100,2,1000\n", "multigpu.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->has_times);
  EXPECT_EQ(t->pods[0].num_gpu, 2);
  EXPECT_TRUE(t->pods[0].gpu_models.empty());
}

TEST(AlibabaPods, BadInputSaysWhereAndWhat) {
  EXPECT_THAT(Message(ParseAlibabaPods("", "p.csv").status()),
              HasSubstr("p.csv: the file is empty"));
  EXPECT_THAT(
      Message(ParseAlibabaPods("name,cpu_milli,memory_mib,gpu_milli\np,1,1,1\n", "p.csv").status()),
      HasSubstr("p.csv:1: missing column num_gpu"));
  EXPECT_THAT(Message(ParseAlibabaPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,one,1\n",
                                       "p.csv")
                          .status()),
              HasSubstr("p.csv:2: column num_gpu: \"one\" is not an integer"));
  EXPECT_THAT(
      Message(ParseAlibabaPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,-1,1,1,1\n", "p.csv")
                  .status()),
      HasSubstr("column cpu_milli: -1 is out of range"));
  EXPECT_THAT(Message(ParseAlibabaPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n",
                                       "p.csv")
                          .status()),
              HasSubstr("p.csv:2: column gpu_milli: 500 on 2 GPUs: a share"));
  EXPECT_THAT(Message(ParseAlibabaPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,"
                                       "deletion_time\np,1,1,1,1,10,5\n",
                                       "p.csv")
                          .status()),
              HasSubstr("column deletion_time: 5 is before the creation time 10"));
  EXPECT_THAT(Message(ReadAlibabaPods("/nonexistent/pods.csv").status()),
              HasSubstr("/nonexistent/pods.csv: cannot open"));
}

TEST(AlibabaTrace, ReadsTheRealFiles) {
  const std::string dir = std::string(TESSERA_DATA_DIR) + "/traces/alibaba-gpu-v2023/";
  absl::StatusOr<std::vector<core::NodeSpec>> nodes =
      ReadAlibabaNodes(dir + "openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(*nodes);
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(cluster->node_count(), 1213);
  EXPECT_EQ(cluster->total_gpus(), 6212);
  absl::StatusOr<PodTrace> pods = ReadAlibabaPods(dir + "openb_pod_list_default.csv");
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ(pods->pods.size(), 8152u);
  absl::StatusOr<PodTrace> multi = ReadAlibabaPods(dir + "openb_pod_list_multigpu50.csv");
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_FALSE(multi->has_times);
  absl::StatusOr<std::vector<core::NodeSpec>> all =
      ReadAlibabaNodes(dir + "openb_node_list_all_node.csv");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 1523u);
}

}  // namespace
}  // namespace tessera::sim
