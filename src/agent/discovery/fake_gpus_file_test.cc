#include "agent/discovery/fake_gpus_file.h"

#include <filesystem>
#include <fstream>

#include "agent/discovery/fake_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "records/inventory.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;

// Two H100s joined by NVLink, as the shared contract's example writes them (one field a line).
constexpr char kTwoGpus[] = R"({"version": 1,
 "driver_version": "580.95.05",
 "cuda_version": "13.0",
 "gpus": [
   {"index": 0,
    "minor": 0,
    "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000000",
    "model": "H100-80GB",
    "name": "NVIDIA H100 80GB HBM3",
    "memory_mib": 81559,
    "sm_count": 132,
    "pci_bus_id": "00000000:18:00.0",
    "numa_node": 0,
    "cpu_affinity": "0-55",
    "mig": {"capable": true, "enabled": false, "instances": []},
    "healthy": true
   },
   {"index": 1,
    "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000001",
    "model": "H100-80GB",
    "memory_mib": 81559,
    "pci_bus_id": "0000:2a:00.0",
    "numa_node": 1,
    "cpu_affinity": "56-111",
    "xid": [13]
   }],
 "links": [["X", "NV18"],
           ["NV18", "X"]]
}
)";

TEST(FakeGpusFile, ReadsTheContractExample) {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(kTwoGpus, "gpus.json");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->driver_version, "580.95.05");
  EXPECT_EQ(node->cuda_version, "13.0");
  ASSERT_EQ(node->gpus.size(), 2u);
  const DiscoveredGpu& g0 = node->gpus[0];
  EXPECT_EQ(g0.spec.index, 0);
  EXPECT_EQ(g0.minor, 0);
  EXPECT_EQ(g0.spec.uuid, "GPU-6f1c2a9e-0000-4000-8000-000000000000");
  EXPECT_EQ(g0.spec.model, "H100-80GB");
  EXPECT_EQ(g0.product_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g0.spec.memory_mib, 81559);
  EXPECT_EQ(g0.spec.sm_count, 132);
  EXPECT_EQ(g0.spec.pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(g0.spec.numa_node, 0);
  EXPECT_EQ(g0.spec.cpu_affinity, "0-55");
  EXPECT_FALSE(g0.spec.mig_enabled);
  EXPECT_TRUE(g0.health.healthy);
  const DiscoveredGpu& g1 = node->gpus[1];
  EXPECT_EQ(g1.minor, 1);                             // default: the index
  EXPECT_EQ(g1.spec.pci_bus_id, "00000000:2A:00.0");  // 8-digit domain, upper case
  EXPECT_EQ(g1.spec.sm_count, 0);
  EXPECT_TRUE(g1.health.healthy);  // XID 13 is an application error
  EXPECT_EQ(node->links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 18}));
  EXPECT_EQ(node->NvLinkDomain(), "");

  // The inventory it becomes reads back as the scheduler reads it.
  records::Inventory inv = node->ToInventory();
  EXPECT_TRUE(inv.health.empty());
  absl::StatusOr<records::Inventory> back =
      records::InventoryFromJson(records::InventoryToJson(inv));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gpus[1].uuid, g1.spec.uuid);
  EXPECT_EQ(back->links.at(1, 0), (core::Link{core::LinkKind::kNvLink, 18}));
}

std::string OneGpu(const std::string& extra, const std::string& top = "") {
  return R"({"version": 1,
"gpus": [{"index": 0, "uuid": "GPU-00000000-0000-4000-8000-000000000000",
          "model": "A100-80GB", "memory_mib": 81920)" +
         extra + R"(}])" + top + "}\n";
}

TEST(FakeGpusFile, HealthComesFromXidsOrTheHealthyField) {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(OneGpu(R"(, "xid": [79, 13])"), "f");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->gpus[0].health.healthy);
  EXPECT_EQ(node->gpus[0].health.xids, std::vector<int32_t>{79});
  EXPECT_EQ(node->gpus[0].health.reason, "XID 79: GPU has fallen off the bus");
  records::Inventory inv = node->ToInventory();
  ASSERT_EQ(inv.health.size(), 1u);
  EXPECT_FALSE(inv.healthy(0));

  node = ParseFakeGpusFile(OneGpu(R"(, "healthy": false)"), "f.json");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->gpus[0].health.healthy);
  EXPECT_EQ(node->gpus[0].health.reason, "marked unhealthy in f.json");
}

TEST(FakeGpusFile, MigInstancesAndFabric) {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(
      OneGpu(
          R"(, "mig": {"enabled": true, "instances": [{"profile": "3g.40gb", "start": 4},
                                                        {"profile": "1g.10gb", "start": 0}]})",
          R"(, "fabric": {"cluster_uuid": "b7f0e0a1-1234-4abc-8def-0123456789ab", "clique_id": 3})"),
      "f");
  ASSERT_TRUE(node.ok()) << node.status();
  const core::GpuSpec& spec = node->gpus[0].spec;
  EXPECT_TRUE(spec.mig_enabled);
  ASSERT_EQ(spec.mig_layout.size(), 2u);
  EXPECT_EQ(spec.mig_layout[0].start, 4);
  EXPECT_EQ(node->NvLinkDomain(), "b7f0e0a1-1234-4abc-8def-0123456789ab.3");
}

// The harness's L40S node: a GPU without MIG profiles that says so (this crashed the parser).
TEST(FakeGpusFile, AGpuWithoutMigProfilesMayListNoInstances) {
  std::string text = OneGpu(R"(, "mig": {"capable": false, "enabled": false, "instances": []})");
  text.replace(text.find("A100-80GB"), 9, "L40S-48GB");
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(text, "f");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->gpus[0].spec.mig_enabled);
  EXPECT_TRUE(node->gpus[0].mig_uuids.empty());
}

// MIG instances have device UUIDs: as written, else a stable one of the fake driver's.
TEST(FakeGpusFile, MigInstancesHaveDeviceUuids) {
  absl::StatusOr<NodeGpus> node =
      ParseFakeGpusFile(OneGpu(R"(, "mig": {"enabled": true, "instances": [
          {"profile": "3g.40gb", "start": 4, "uuid": "MIG-0a1b2c3d-0000-4000-8000-000000000001"},
          {"profile": "1g.10gb", "start": 0}]})"),
                        "f");
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_EQ(node->gpus[0].mig_uuids.size(), 2u);
  EXPECT_EQ(node->gpus[0].mig_uuids[0], "MIG-0a1b2c3d-0000-4000-8000-000000000001");
  EXPECT_EQ(node->gpus[0].mig_uuids[1],
            FakeMigUuid("GPU-00000000-0000-4000-8000-000000000000", "1g.10gb", 0));
  EXPECT_TRUE(IsMigUuid(node->gpus[0].mig_uuids[1])) << node->gpus[0].mig_uuids[1];
  EXPECT_NE(FakeMigUuid("GPU-00000000-0000-4000-8000-000000000000", "1g.10gb", 1),
            node->gpus[0].mig_uuids[1]);
}

std::string Error(const std::string& text) {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(text, "gpus.json");
  EXPECT_FALSE(node.ok()) << text;
  return node.ok() ? "" : std::string(node.status().message());
}

TEST(FakeGpusFile, ErrorsNameTheFileLineAndField) {
  // Syntax: line and column of the offending character.
  EXPECT_THAT(Error("{\"version\": 1,\n \"gpus\": [}\n"),
              HasSubstr("gpus.json:2:11: not valid JSON"));
  EXPECT_THAT(Error("{\"version\": 1, \"version\": 2}"),
              HasSubstr("gpus.json:1:24: not valid JSON: duplicate key \"version\""));
  EXPECT_THAT(Error(""), HasSubstr("gpus.json:1:1: not valid JSON"));
  // Fields, each on the line the contract example puts it.
  std::string text = kTwoGpus;
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  EXPECT_THAT(Error(replace("\"memory_mib\": 81559,\n    \"sm_count\"",
                            "\"memory_mib\": -1,\n    \"sm_count\"")),
              HasSubstr("gpus.json:10: gpus[0].memory_mib: must be positive"));
  EXPECT_THAT(Error(replace("\"index\": 1", "\"index\": 2")),
              HasSubstr("gpus.json:18: gpus[1].index: is 2, expected 1"));
  EXPECT_THAT(Error(replace("\"sm_count\": 132", "\"sm_cuont\": 132")),
              HasSubstr("gpus.json:11: gpus[0].sm_cuont: unknown field (known here: index,"));
  EXPECT_THAT(Error(replace("-000000000001\"", "-00000000000\"")),
              HasSubstr("gpus.json:19: gpus[1].uuid: \"GPU-6f1c2a9e-0000-4000-8000-00000000000\" "
                        "is not a GPU UUID"));
  EXPECT_THAT(Error(replace("-000000000001\"", "-000000000000\"")),
              HasSubstr("gpus.json:19: gpus[1].uuid: \"GPU-6f1c2a9e-0000-4000-8000-000000000000\" "
                        "is already another GPU's"));
  EXPECT_THAT(Error(replace("\"0000:2a:00.0\"", "\"00000000:18:00.0\"")),
              HasSubstr("gpus.json:22: gpus[1].pci_bus_id: \"00000000:18:00.0\" is already"));
  EXPECT_THAT(Error(replace("\"0000:2a:00.0\"", "\"2a:00.0\"")),
              HasSubstr("gpus.json:22: gpus[1].pci_bus_id: \"2a:00.0\" is not a PCI bus id"));
  EXPECT_THAT(Error(replace("\"56-111\"", "\"56-\"")),
              HasSubstr("gpus.json:24: gpus[1].cpu_affinity: \"56-\" is not a CPU list"));
  EXPECT_THAT(Error(replace("\"healthy\": true", "\"healthy\": true, \"xid\": [48]")),
              HasSubstr("gpus.json:16: gpus[0].healthy: is true, but XID 48: double bit ECC "
                        "error marks a GPU unhealthy"));
  EXPECT_THAT(Error(replace("[\"NV18\", \"X\"]", "[\"NV12\", \"X\"]")),
              HasSubstr("gpus.json:28: links[1][0]: is NV12 but links[0][1] is NV18 (the matrix "
                        "must be symmetric)"));
  EXPECT_THAT(Error(replace("[\"NV18\", \"X\"]", "[\"NVX\", \"X\"]")),
              HasSubstr("gpus.json:28: links[1][0]:"));
  EXPECT_THAT(Error(replace("[\"X\", \"NV18\"]", "[\"NV18\", \"X\"]")),
              HasSubstr("gpus.json:27: links[0][0]: expected X on the diagonal"));
  EXPECT_THAT(Error(replace(",\n           [\"NV18\", \"X\"]", "")),
              HasSubstr("gpus.json:27: links: has 1 rows for 2 GPUs"));
  EXPECT_THAT(Error(replace("\"model\": \"H100-80GB\",\n    \"name\"",
                            "\"model\": \"H100 80GB\",\n    \"name\"")),
              HasSubstr("gpus.json:8: gpus[0].model: \"H100 80GB\" must be a label value"));
  EXPECT_THAT(Error(replace("\"version\": 1", "\"version\": 2")),
              HasSubstr("gpus.json:1: version: version 2 is not supported"));
  EXPECT_THAT(Error(replace("\"minor\": 0", "\"minor\": 1")),
              HasSubstr("gpus.json:18: gpus[1].index: /dev/nvidia1 is already another GPU's"));
  EXPECT_THAT(Error("{\"version\": 1, \"gpus\": []}"),
              HasSubstr("gpus.json:1: gpus: is empty: a node without GPUs needs no tessera agent"));
  EXPECT_THAT(Error("{\"version\": 1}"),
              HasSubstr("gpus.json:1: the document: missing field \"gpus\""));
  EXPECT_THAT(Error("[1]"), HasSubstr("gpus.json:1: the document: expected an object"));
}

TEST(FakeGpusFile, MigAndFabricErrors) {
  EXPECT_THAT(
      Error(OneGpu(
          R"(, "mig": {"enabled": true, "instances": [{"profile": "3g.40gb", "start": 2}]})")),
      HasSubstr("gpus.json:3: gpus[0].mig.instances: 3g.40gb cannot start at slice 2"));
  EXPECT_THAT(
      Error(OneGpu(
          R"(, "mig": {"enabled": false, "instances": [{"profile": "3g.40gb", "start": 4}]})")),
      HasSubstr("gpus[0].mig.instances: instances are configured only when enabled is true"));
  EXPECT_THAT(
      Error(OneGpu(
          R"(, "mig": {"enabled": true, "instances": [{"profile": "9g.99gb", "start": 0}]})")),
      HasSubstr("gpus[0].mig.instances[0].profile: \"9g.99gb\" is not a A100-80GB MIG profile"));
  std::string l4 = OneGpu("");
  l4.replace(l4.find("A100-80GB"), 9, "L4");
  l4.insert(l4.rfind("}]"), R"(, "mig": {"capable": true})");
  EXPECT_THAT(Error(l4), HasSubstr("gpus[0].mig.capable: tessera has no MIG profiles for L4"));
  // A GPU without a MIG table says so with an empty instance list (the harness's L40S file).
  std::string l40s = OneGpu("");
  l40s.replace(l40s.find("A100-80GB"), 9, "L40S-48GB");
  l40s.insert(l40s.rfind("}]"),
              R"(, "mig": {"capable": false, "enabled": false, "instances": []})");
  EXPECT_TRUE(ParseFakeGpusFile(l40s, "l40s.json").ok());
  EXPECT_THAT(Error(OneGpu("", R"(, "fabric": {"cluster_uuid": "nope", "clique_id": 1})")),
              HasSubstr("gpus.json:3: fabric.cluster_uuid: \"nope\" is not a UUID"));
  EXPECT_THAT(Error(OneGpu("", R"(, "links": [["X", "NV4"]])")),
              HasSubstr("links[0]: has 2 cells for 1 GPUs"));
}

TEST(FakeGpusFile, HelperFormats) {
  EXPECT_TRUE(IsGpuUuid("GPU-6f1c2a9e-0000-4000-8000-000000000000"));
  EXPECT_FALSE(IsGpuUuid("MIG-6f1c2a9e-0000-4000-8000-000000000000"));
  EXPECT_FALSE(IsGpuUuid("GPU-6f1c2a9e00004000-8000-000000000000"));
  EXPECT_TRUE(IsCpuList("0-55,112-167"));
  EXPECT_TRUE(IsCpuList("3"));
  EXPECT_FALSE(IsCpuList("5-3"));
  EXPECT_FALSE(IsCpuList("0,,1"));
  EXPECT_FALSE(IsCpuList(""));
  EXPECT_EQ(NormalizePciBusId("0000:9b:00.0"), "00000000:9B:00.0");
  EXPECT_EQ(NormalizePciBusId("00000000:18:00.0"), "00000000:18:00.0");
  EXPECT_EQ(NormalizePciBusId("000:18:00.0"), "");
  EXPECT_EQ(NormalizePciBusId("0000:18:00"), "");
}

TEST(FakeGpusFile, WhatNvmlWouldReportAreConditions) {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(
      OneGpu(R"(, "recovery_action": "reset", "row_remap": {"pending": true})"), "f");
  ASSERT_TRUE(node.ok()) << node.status();
  const DiscoveredGpu& g = node->gpus[0];
  ASSERT_EQ(g.conditions.size(), 2u);
  EXPECT_EQ(g.conditions[0].condition, HealthCondition::kRecoveryReset);
  EXPECT_EQ(g.conditions[1].condition, HealthCondition::kRowRemapPending);
  EXPECT_FALSE(g.health.healthy);
  EXPECT_EQ(g.fault, FaultEffect::kFail);
  EXPECT_THAT(g.health.reason, HasSubstr("needs a reset (recovery action reset)"));

  node = ParseFakeGpusFile(OneGpu(R"(, "retired_pages_pending": true)"), "f");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->gpus[0].health.healthy);
  EXPECT_EQ(node->gpus[0].fault, FaultEffect::kDrain);

  node = ParseFakeGpusFile(OneGpu(R"(, "lost": true)"), "f");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->gpus[0].conditions.at(0).condition, HealthCondition::kGpuLost);
  EXPECT_EQ(node->gpus[0].health.xids, std::vector<int32_t>{79});

  node = ParseFakeGpusFile(OneGpu(R"(, "recovery_action": "none", "lost": false)"), "f");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->gpus[0].conditions.empty());
  EXPECT_TRUE(node->gpus[0].health.healthy);
  EXPECT_EQ(node->gpus[0].fault, FaultEffect::kNone);

  node = ParseFakeGpusFile(OneGpu(R"(, "recovery_action": "later")"), "f");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("gpus[0].recovery_action: \"later\" is not a"));
}

TEST(FakeGpusFile, NvLinksDownArePublishedAsWhatLiesUnderThem) {
  std::string text = kTwoGpus;
  const std::string links = R"("links": [["X", "NV18"],)";
  text.replace(text.find(links), links.size(),
               R"("nvlink_down": [[1, 0]], "pcie_links": [["X", "SYS"], ["SYS", "X"]],
 "links": [["X", "NV18"],)");
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(text, "f");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->links.at(0, 1), (core::Link{core::LinkKind::kSys, 0}));
  std::string bad = kTwoGpus;
  bad.replace(bad.find(links), links.size(),
              R"("nvlink_down": [[0, 2]], "links": [["X", "NV18"],)");
  node = ParseFakeGpusFile(bad, "f");
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("nvlink_down[0]: must name two different GPUs"));
}

TEST(FakeGpusFile, XidEventLines) {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(kTwoGpus, "f");
  ASSERT_TRUE(node.ok()) << node.status();
  absl::StatusOr<HealthEvent> e = ParseFakeXidEvent(R"({"gpu": 1, "xid": 31})", *node);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->gpu_index, 1);
  EXPECT_EQ(e->uuid, "GPU-6f1c2a9e-0000-4000-8000-000000000001");
  EXPECT_EQ(e->klass.cause, FaultCause::kApplication);
  e = ParseFakeXidEvent(R"({"gpu": 0, "xid": 13, "mig": "1g.10gb@0"})", *node);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->mig, "1g.10gb@0");
  EXPECT_THAT(ParseFakeXidEvent(R"({"gpu": 2, "xid": 31})", *node).status().message(),
              HasSubstr("gpu must be a GPU index of 0..1"));
  EXPECT_THAT(ParseFakeXidEvent(R"({"gpu": 0, "xid": 31, "pid": 7})", *node).status().message(),
              HasSubstr("unknown field \"pid\""));
  EXPECT_FALSE(ParseFakeXidEvent("not json", *node).ok());
}

TEST(FakeDiscovery, ReadsTheFileEachTimeAndNoticesChanges) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "fake_discovery_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "gpus.json").string();
  std::ofstream(path) << kTwoGpus;
  FakeDiscovery discovery(path);
  EXPECT_THAT(discovery.Describe(), HasSubstr(path));
  absl::StatusOr<NodeGpus> node = discovery.Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->gpus[1].health.healthy);
  absl::StatusOr<WaitResult> quiet = discovery.Wait(std::chrono::milliseconds(50));
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE(quiet->changed);

  std::string text = kTwoGpus;
  text.replace(text.find("\"xid\": [13]"), 11, "\"xid\": [13, 79]");
  std::ofstream(path) << text;
  absl::StatusOr<WaitResult> changed = discovery.Wait(std::chrono::seconds(10));
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(changed->changed);
  node = discovery.Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->gpus[1].health.healthy);

  std::filesystem::remove(path);
  node = discovery.Discover();
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("cannot read the GPU description file " + path));
  std::filesystem::remove_all(dir);
}

TEST(FakeDiscovery, XidEventsAppendedAfterItStarted) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "fake_discovery_events_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "gpus.json").string();
  std::ofstream(path) << kTwoGpus;
  const std::string events = FakeXidEventsPath(path);
  std::ofstream(events) << R"({"gpu": 0, "xid": 79})"
                        << "\n";  // before it started: not seen
  FakeDiscovery discovery(path);
  ASSERT_TRUE(discovery.Discover().ok());
  absl::StatusOr<WaitResult> quiet = discovery.Wait(std::chrono::milliseconds(50));
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->events.empty());

  std::ofstream(events, std::ios::app) << R"({"gpu": 1, "xid": 31})"
                                       << "\n"
                                       << "bad line\n"
                                       << R"({"gpu": 0, "xid": 48})";  // no newline yet
  absl::StatusOr<WaitResult> got = discovery.Wait(std::chrono::seconds(10));
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->events.size(), 1u);
  EXPECT_EQ(got->events[0].xid, 31);
  EXPECT_EQ(got->events[0].gpu_index, 1);
  ASSERT_EQ(got->warnings.size(), 1u);
  EXPECT_THAT(got->warnings[0], HasSubstr("gpus.json.events: \"bad line\" is not a JSON object"));
  EXPECT_FALSE(got->changed);

  std::ofstream(events, std::ios::app) << "\n";  // the line is complete now
  got = discovery.Wait(std::chrono::seconds(10));
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->events.size(), 1u);
  EXPECT_EQ(got->events[0].xid, 48);
  EXPECT_TRUE(got->events[0].critical());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::agent
