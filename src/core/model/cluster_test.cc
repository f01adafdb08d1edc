#include "core/model/cluster.h"

#include <memory>

#include "common/strings.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

NodeSpec Node(const std::string& name, int gpus, const std::string& model = "A100-80GB") {
  NodeSpec n;
  n.name = name;
  n.cpu_milli = 64000;
  n.memory_mib = 512 * 1024;
  for (int g = 0; g < gpus; ++g) {
    GpuSpec gpu;
    gpu.index = g;
    gpu.model = model;
    gpu.memory_mib = 80 * 1024;
    n.gpus.push_back(gpu);
  }
  return n;
}

// Copies share the nodes' slots in chunks (of 256): a change to one copy, in any chunk, is that
// copy's alone, and every name is found in both, whichever copy goes first.
TEST(Cluster, CopiesShareTheirNodesUntilOneChangesThem) {
  std::vector<NodeSpec> specs;
  for (int i = 0; i < 600; ++i) specs.push_back(Node(StrCat("node-number-", i), 8));
  auto base = std::make_unique<Cluster>(*Cluster::Create(specs));
  Cluster copy = *base;

  absl::StatusOr<NodeId> added = copy.AddNode(Node("joined-after-the-copy", 4, "H100-80GB"));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->value(), 600);
  ASSERT_TRUE(copy.UpdateNode(NodeId(300), Node("node-number-300", 2)).ok());
  copy.RemoveNode(NodeId(5));
  EXPECT_FALSE(copy.AddNode(Node("node-number-7", 1)).ok());  // taken in the copy too

  // The base is as it was.
  EXPECT_EQ(base->node_count(), 600);
  EXPECT_EQ(base->total_gpus(), 4800);
  EXPECT_FALSE(base->FindNode("joined-after-the-copy").valid());
  EXPECT_EQ(base->node(NodeId(300)).gpu_count(), 8);
  EXPECT_TRUE(base->live(NodeId(5)));
  EXPECT_EQ(base->models().size(), 1u);
  // The copy has its changes.
  EXPECT_EQ(copy.node_count(), 601);
  EXPECT_EQ(copy.total_gpus(), 4800 - 8 - 6 + 4);
  EXPECT_EQ(copy.node(NodeId(300)).gpu_count(), 2);
  EXPECT_FALSE(copy.live(NodeId(5)));
  EXPECT_EQ(copy.node(NodeId(5)).name, "");
  EXPECT_EQ(copy.uniform_model(*added), 1);
  EXPECT_EQ(copy.ModelMask(*added, copy.ResolveModels({"H100-80GB"})), 0b1111u);

  // Every name found in each, and still in the copy once the base is gone.
  for (int i = 0; i < 600; ++i) {
    const std::string name = StrCat("node-number-", i);
    EXPECT_EQ(base->FindNode(name), NodeId(i)) << name;
    EXPECT_EQ(copy.FindNode(name), i == 5 ? NodeId() : NodeId(i)) << name;
  }
  base.reset();
  for (int i = 0; i < 600; ++i) {
    const std::string name = StrCat("node-number-", i);
    EXPECT_EQ(copy.FindNode(name), i == 5 ? NodeId() : NodeId(i)) << name;
    if (i != 5) EXPECT_EQ(copy.node(NodeId(i)).name, name);
  }
  EXPECT_EQ(copy.FindNode("joined-after-the-copy"), *added);
  int count = 0;
  for (const NodeSpec& n : copy.nodes()) count += n.name.empty() ? 0 : 1;
  EXPECT_EQ(count, 600);
}

}  // namespace
}  // namespace tessera::core
