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

// The name index is shared too: a copy's removals, re-additions and many additions (past the
// point where it takes a map of its own) are found in the copy alone.
TEST(Cluster, NamesAddedToACopyAreItsAlone) {
  std::vector<NodeSpec> specs;
  for (int i = 0; i < 300; ++i) specs.push_back(Node(StrCat("n-", i), 1));
  const Cluster base = *Cluster::Create(specs);
  Cluster copy = base;
  copy.RemoveNode(NodeId(9));
  absl::StatusOr<NodeId> again = copy.AddNode(Node("n-9", 2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, NodeId(300));
  EXPECT_EQ(copy.FindNode("n-9"), NodeId(300));
  EXPECT_EQ(base.FindNode("n-9"), NodeId(9));
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(copy.AddNode(Node(StrCat("more-", i), 1)).ok());
    if (i == 100) copy.RemoveNode(copy.FindNode("more-50"));
  }
  EXPECT_FALSE(copy.AddNode(Node("more-3", 1)).ok());  // taken
  ASSERT_TRUE(copy.AddNode(Node("more-50", 1)).ok());  // free again
  for (int i = 0; i < 200; ++i) {
    const std::string name = StrCat("more-", i);
    const NodeId id = copy.FindNode(name);
    ASSERT_TRUE(id.valid()) << name;
    EXPECT_EQ(copy.node(id).name, name);
    EXPECT_FALSE(base.FindNode(name).valid()) << name;
  }
  EXPECT_EQ(copy.FindNode("more-50"), NodeId(copy.node_count() - 1));
  EXPECT_EQ(copy.FindNode("n-9"), NodeId(300));
  EXPECT_EQ(copy.FindNode("n-10"), NodeId(10));
  EXPECT_EQ(base.node_count(), 300);
}

}  // namespace
}  // namespace tessera::core
