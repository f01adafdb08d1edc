#include "k8s/scheduler/node_index.h"

#include "common/random.h"
#include "common/strings.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::NodeObject;

// The index answers exactly what NodeAllows answers node by node, on random nodes (labels from a
// small vocabulary, some tainted, some removed and re-added) and random constraints of every
// kind the scheduler reads: nodeSelector, required node affinity with all six operators and
// matchFields, tolerations.
TEST(NodeIndex, AllowsExactlyWhatNodeAllowsAllows) {
  Random rnd(11);
  auto pick = [&](int n) { return static_cast<int>(rnd.Uniform(n)); };
  const std::vector<std::string> keys = {"pool", "zone", "gen", "team"};
  const std::vector<std::string> values = {"a", "b", "c", "1", "7", "20"};
  constexpr int kNodes = 150;
  std::vector<std::shared_ptr<const NodeInfo>> nodes(kNodes);
  NodeIndex index;
  auto make = [&](int i) {
    NodeObject n(StrCat("node-", i));
    for (const std::string& k : keys) {
      if (pick(3) != 0) n.Label(k, values[pick(values.size())]);
    }
    json j = n.Json();
    if (pick(5) == 0) {
      j["spec"]["taints"] = json::array({{{"key", pick(2) ? "dedicated" : "gpu"},
                                          {"value", values[pick(3)]},
                                          {"effect", pick(2) ? "NoSchedule" : "NoExecute"}}});
    }
    return DecodeNode(j);
  };
  for (int i = 0; i < kNodes; ++i) {
    nodes[i] = make(i);
    index.Set(i, nodes[i]);
  }
  for (int i = 0; i < kNodes; i += 7) {  // re-labelled or removed
    if (i % 2) {
      nodes[i] = make(i);
      index.Set(i, nodes[i]);
    } else {
      nodes[i] = nullptr;
      index.Remove(i);
    }
  }
  const std::vector<std::string> ops = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"};
  for (int round = 0; round < 400; ++round) {
    json pod = testing::PodObject("ns", "p").Json();
    json& spec = pod["spec"];
    if (pick(2)) {
      spec["nodeSelector"] = {{keys[pick(keys.size())], values[pick(values.size())]}};
    }
    if (pick(2)) {
      json terms = json::array();
      for (int t = pick(3); t >= 0; --t) {
        json exprs = json::array();
        for (int e = pick(3); e >= 0; --e) {
          const std::string& op = ops[pick(ops.size())];
          json req = {{"key", keys[pick(keys.size())]}, {"operator", op}};
          if (op == "Gt" || op == "Lt") {
            req["values"] = {std::to_string(pick(25))};
          } else if (op == "In" || op == "NotIn") {
            req["values"] = {values[pick(values.size())], values[pick(values.size())]};
          }
          exprs.push_back(req);
        }
        json term = {{"matchExpressions", exprs}};
        if (pick(4) == 0) {
          term["matchFields"] = json::array({{{"key", "metadata.name"},
                                              {"operator", pick(2) ? "In" : "NotIn"},
                                              {"values", {StrCat("node-", pick(kNodes))}}}});
        }
        terms.push_back(term);
      }
      spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
          ["nodeSelectorTerms"] = terms;
    }
    if (pick(2)) {
      spec["tolerations"] = json::array({{{"key", pick(2) ? "dedicated" : ""},
                                          {"operator", pick(2) ? "Exists" : "Equal"},
                                          {"value", values[pick(3)]}}});
    }
    std::shared_ptr<const PodInfo> p = DecodePod(pod);
    ASSERT_TRUE(p->input_error.empty()) << p->input_error;
    NodeIndex::Result r = index.Allowed(p->constraints, kNodes + 5);
    int taint = 0, selector = 0;
    for (int i = 0; i < kNodes + 5; ++i) {
      if (i >= kNodes || !nodes[i]) {
        EXPECT_FALSE(r.allowed[i]);
        continue;
      }
      std::string why;
      const bool allows = NodeAllows(*nodes[i], *p, &why);
      ASSERT_EQ(r.allowed[i], allows) << "round " << round << " node " << i << " " << pod.dump();
      if (!allows) ++(why == "taint" ? taint : selector);
    }
    EXPECT_EQ(r.taint, taint) << round;
    EXPECT_EQ(r.selector, selector) << round;
  }
}

// A label that takes a new value every second (what the scheduler benchmark's churn does) keeps
// one value in the index, not one per value it ever had; a removed node leaves none.
TEST(NodeIndex, ValuesNoNodeHasAreForgotten) {
  NodeIndex index;
  index.Set(0, DecodeNode(NodeObject("steady").Label("pool", "a").Json()));
  for (int i = 0; i < 1000; ++i) {
    index.Set(1, DecodeNode(NodeObject("churning").Label("bench/churn", StrCat(i)).Json()));
  }
  EXPECT_EQ(index.label_values(), 2);
  NodeConstraints c;
  c.node_selector = {{"bench/churn", "999"}};
  EXPECT_EQ(index.Allowed(c, 2).allowed, (std::vector<bool>{false, true}));
  c.node_selector = {{"bench/churn", "998"}};
  EXPECT_EQ(index.Allowed(c, 2).allowed, (std::vector<bool>{false, false}));
  index.Remove(1);
  index.Remove(0);
  EXPECT_EQ(index.label_values(), 0);
}

}  // namespace
}  // namespace tessera::k8s
