#include "agent/publish/advertisement.h"

#include "agent/discovery/fake_gpus_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "records/inventory.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

NodeGpus Gpus(int n, const std::string& model = "H100-80GB", int64_t memory = 81559,
              bool fabric = false) {
  json gpus = json::array();
  json links = json::array();
  for (int i = 0; i < n; ++i) {
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "GPU-00000000-0000-4000-8000-%012d", i);
    gpus.push_back({{"index", i}, {"uuid", uuid}, {"model", model}, {"memory_mib", memory}});
    json row = json::array();
    for (int k = 0; k < n; ++k) row.push_back(i == k ? "X" : "NV18");
    links.push_back(row);
  }
  json doc = {{"version", 1}, {"gpus", gpus}, {"links", links}};
  if (fabric) {
    doc["fabric"] = {{"cluster_uuid", "b7f0e0a1-1234-4abc-8def-0123456789ab"}, {"clique_id", 3}};
  }
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(doc.dump(), "test");
  EXPECT_TRUE(node.ok()) << node.status();
  return *node;
}

// A Node as the API server returns it, with whatever the kubelet put there.
json KubeletNode() {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", "gpu-1"},
            {"labels", {{"kubernetes.io/hostname", "gpu-1"}}},
            {"annotations", {{"node.alpha.kubernetes.io/ttl", "0"}}}}},
          {"status",
           {{"capacity", {{"cpu", "64"}, {"memory", "512Gi"}, {"pods", "110"}}},
            {"allocatable", {{"cpu", "63"}, {"memory", "500Gi"}, {"pods", "110"}}}}}};
}

json Apply(json node, const NodePatches& p) {
  if (!p.metadata.is_null()) node.merge_patch(p.metadata);
  if (!p.status.is_null()) node.merge_patch(p.status);
  return node;
}

TEST(Advertisement, LabelsResourcesAndTheInventory) {
  NodeAdvertisement ad = AdvertisementFor(Gpus(8));
  EXPECT_EQ(ad.labels,
            (std::map<std::string, std::string>{{"tessera.dev/gpu-count", "8"},
                                                {"tessera.dev/gpu-model", "H100-80GB"}}));
  EXPECT_EQ(ad.resources,
            (std::map<std::string, std::string>{{"tessera.dev/gpu", "8"},
                                                {"tessera.dev/gpu-compute", "800"},
                                                {"tessera.dev/gpu-memory", "652472Mi"}}));
  absl::StatusOr<records::Inventory> inv = records::InventoryFromJson(ad.inventory);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->gpus.size(), 8u);

  NodeAdvertisement gb200 = AdvertisementFor(Gpus(4, "GB200", 189471, /*fabric=*/true));
  EXPECT_EQ(gb200.labels["tessera.dev/nvlink-domain"], "b7f0e0a1-1234-4abc-8def-0123456789ab.3");
}

TEST(Advertisement, FirstPublicationThenNothingToDo) {
  NodeAdvertisement ad = AdvertisementFor(Gpus(2));
  NodePatches first = DiffNode(KubeletNode(), ad);
  ASSERT_FALSE(first.metadata.is_null());
  ASSERT_FALSE(first.status.is_null());
  EXPECT_EQ(first.metadata["metadata"]["annotations"]["tessera.dev/gpu-inventory"], ad.inventory);
  EXPECT_EQ(first.metadata["metadata"]["annotations"]["tessera.dev/agent-labels"],
            "tessera.dev/gpu-count,tessera.dev/gpu-model");
  EXPECT_EQ(first.metadata["metadata"]["labels"],
            (json{{"tessera.dev/gpu-count", "2"}, {"tessera.dev/gpu-model", "H100-80GB"}}));
  EXPECT_EQ(first.status["status"]["capacity"], (json{{"tessera.dev/gpu", "2"},
                                                      {"tessera.dev/gpu-compute", "200"},
                                                      {"tessera.dev/gpu-memory", "163118Mi"}}));
  EXPECT_EQ(first.status["status"]["allocatable"], first.status["status"]["capacity"]);
  EXPECT_THAT(first.changes,
              ElementsAre("inventory: published", "label tessera.dev/gpu-count: (none) -> 2",
                          "label tessera.dev/gpu-model: (none) -> H100-80GB",
                          "resource tessera.dev/gpu: (none) -> 2",
                          "resource tessera.dev/gpu-compute: (none) -> 200",
                          "resource tessera.dev/gpu-memory: (none) -> 163118Mi"));

  json node = Apply(KubeletNode(), first);
  EXPECT_EQ(node["status"]["capacity"]["cpu"], "64");  // the kubelet's own are kept
  NodePatches again = DiffNode(node, ad);
  EXPECT_TRUE(again.metadata.is_null());
  EXPECT_TRUE(again.status.is_null());
  EXPECT_TRUE(again.changes.empty());
}

TEST(Advertisement, TheSameThingWrittenDifferentlyIsNotRewritten) {
  NodeAdvertisement ad = AdvertisementFor(Gpus(8));
  json node = Apply(KubeletNode(), DiffNode(KubeletNode(), ad));
  // The API server writes quantities in canonical form; a person may indent the record.
  node["status"]["capacity"]["tessera.dev/gpu-memory"] = "652472Mi";
  node["metadata"]["annotations"]["tessera.dev/gpu-inventory"] = json::parse(ad.inventory).dump(2);
  NodePatches p = DiffNode(node, ad);
  EXPECT_TRUE(p.metadata.is_null()) << p.metadata;
  EXPECT_TRUE(p.status.is_null());

  NodeAdvertisement even = AdvertisementFor(Gpus(8, "A100-80GB", 81920));  // 640Gi exactly
  node = Apply(KubeletNode(), DiffNode(KubeletNode(), even));
  node["status"]["capacity"]["tessera.dev/gpu-memory"] = "640Gi";
  node["status"]["allocatable"]["tessera.dev/gpu-memory"] = "640Gi";
  EXPECT_TRUE(DiffNode(node, even).status.is_null());
  node["status"]["allocatable"]["tessera.dev/gpu-memory"] = "0";  // a re-registered kubelet
  EXPECT_THAT(DiffNode(node, even).changes, ElementsAre("resource tessera.dev/gpu-memory: 640Gi -> "
                                                        "655360Mi"));
}

TEST(Advertisement, AnUnhealthyGpuChangesOnlyTheInventory) {
  NodeGpus gpus = Gpus(2);
  NodeAdvertisement ad = AdvertisementFor(gpus);
  json node = Apply(KubeletNode(), DiffNode(KubeletNode(), ad));
  gpus.gpus[1].health = records::GpuHealth{false, {79}, "XID 79: GPU has fallen off the bus"};
  NodeAdvertisement sick = AdvertisementFor(gpus);
  EXPECT_EQ(sick.resources, ad.resources);  // running pods keep being admitted
  NodePatches p = DiffNode(node, sick);
  EXPECT_THAT(p.changes, ElementsAre("inventory: changed"));
  EXPECT_TRUE(p.status.is_null());
  absl::StatusOr<records::Inventory> inv = records::InventoryFromJson(
      p.metadata["metadata"]["annotations"]["tessera.dev/gpu-inventory"].get<std::string>());
  ASSERT_TRUE(inv.ok());
  EXPECT_FALSE(inv->healthy(1));
}

TEST(Advertisement, OnlyTheAgentsOwnLabelsAreRemoved) {
  NodeAdvertisement with_domain = AdvertisementFor(Gpus(4, "GB200", 189471, true));
  json node = Apply(KubeletNode(), DiffNode(KubeletNode(), with_domain));
  EXPECT_EQ(node["metadata"]["labels"]["tessera.dev/nvlink-domain"],
            "b7f0e0a1-1234-4abc-8def-0123456789ab.3");
  // The fabric is gone (say, a tray moved): the agent's label goes with it.
  NodeAdvertisement without = AdvertisementFor(Gpus(4, "GB200", 189471, false));
  NodePatches p = DiffNode(node, without);
  EXPECT_THAT(p.changes, UnorderedElementsAre("label tessera.dev/nvlink-domain: removed"));
  EXPECT_TRUE(p.metadata["metadata"]["labels"]["tessera.dev/nvlink-domain"].is_null());
  EXPECT_EQ(p.metadata["metadata"]["annotations"]["tessera.dev/agent-labels"],
            "tessera.dev/gpu-count,tessera.dev/gpu-model");
  node = Apply(node, p);
  EXPECT_FALSE(node["metadata"]["labels"].contains("tessera.dev/nvlink-domain"));

  // An administrator's own domain label (on a node whose GPUs report no clique) stays.
  node["metadata"]["labels"]["tessera.dev/nvlink-domain"] = "rack-7";
  EXPECT_TRUE(DiffNode(node, without).metadata.is_null());
}

// Uninstalled: everything the agent wrote goes, nothing anyone else wrote does, and a node that
// was already clean needs no patch.
TEST(Advertisement, WithdrawRemovesExactlyWhatTheAgentWrote) {
  json node = KubeletNode();
  node["metadata"]["labels"]["tessera.dev/gpu-node"] = "true";  // the administrator's
  node["metadata"]["labels"]["tessera.dev/rack"] = "r1";        // a topology level's
  node = Apply(node, DiffNode(node, AdvertisementFor(Gpus(4, "GB200", 189471, true))));
  ASSERT_EQ(node["metadata"]["labels"]["tessera.dev/gpu-count"], "4");
  const NodePatches p = WithdrawNode(node);
  const json clean = Apply(node, p);
  json want = KubeletNode();
  want["metadata"]["labels"]["tessera.dev/gpu-node"] = "true";
  want["metadata"]["labels"]["tessera.dev/rack"] = "r1";
  EXPECT_EQ(clean, want) << clean.dump(2);
  EXPECT_THAT(p.changes, ::testing::Contains("label tessera.dev/nvlink-domain: removed"));
  EXPECT_THAT(p.changes, ::testing::Contains("resource tessera.dev/gpu (capacity): removed"));
  const NodePatches again = WithdrawNode(clean);
  EXPECT_TRUE(again.metadata.is_null());
  EXPECT_TRUE(again.status.is_null());
}

}  // namespace
}  // namespace tessera::agent
