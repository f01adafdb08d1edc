#include "agent/dra/driver.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/discovery/fake_discovery.h"
#include "agent/discovery/fake_gpus_file.h"
#include "agent/dra/driver_testing.h"
#include "agent/dra/names.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shim/segments.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::Claim;
using ::testing::ElementsAre;
using testing::FakeClaims;
using testing::FreshTestDir;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::Uid;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

NodeGpus H100s() {
  const std::string path =
      std::string(TESSERA_SOURCE_DIR) + "/test/controlplane/gpus/h100-8x-nvswitch.json";
  absl::StatusOr<NodeGpus> gpus = ParseFakeGpusFile(ReadText(path), path);
  EXPECT_TRUE(gpus.ok()) << gpus.status();
  return *gpus;
}

json Share(const std::string& device, const std::string& memory, const std::string& compute) {
  json consumed = {{"memory", memory}};
  if (!compute.empty()) consumed["compute"] = compute;
  return {{"device", device},
          {"shareID", "5a1e0000-0000-4000-8000-000000000001"},
          {"consumedCapacity", consumed}};
}

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("dra-driver", &options_);
    fs::create_directories(dir_ / "lib/shim");
    fs::create_directories(dir_ / "lib/driver");
    for (const char* f : {"lib/shim/libtessera-cuda.so", "lib/shim/libtessera-nvml.so",
                          "lib/driver/libcuda.so.1", "lib/driver/libnvidia-ml.so.1"}) {
      std::ofstream(dir_ / f) << "ELF";
    }
    options_.edits.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
      if (path == "/hostdev/nvidia-uvm-tools") return absl::NotFoundError(path + ": no such file");
      const std::string name = path.substr(path.rfind('/') + 1);
      if (name == "nvidiactl") return DeviceNumber{'c', 195, 255};
      if (name == "nvidia-uvm") return DeviceNumber{'c', 508, 0};
      return DeviceNumber{'c', 195, std::stoll(name.substr(6))};
    };
    options_.edits.shares.shim_dir = (dir_ / "lib/shim").string();
    options_.edits.shares.driver_lib_dir = (dir_ / "lib/driver").string();
    gpus_ = std::make_shared<const NodeGpus>(H100s());
    pool_ = std::make_shared<const Pool>(
        BuildPool(*gpus_, {.node_name = "node-a", .mig_mode_switch = true}));
  }
  void TearDown() override { shim::RemoveTestTree(dir_); }

  std::unique_ptr<DraDriver> NewDriver() {
    auto d = std::make_unique<DraDriver>(claims_, options_);
    d->SetGpus(gpus_, pool_);
    absl::StatusOr<RestoreReport> r = d->Restore();
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) report_ = *r;
    return d;
  }

  DraDriver::ClaimAnswer PrepareOne(DraDriver& d, const std::string& name) {
    const json& c = claims_.claims.at("ns/" + name);
    ClaimRef ref{"ns", c["metadata"]["uid"], name};
    auto answers = d.Prepare({ref});
    EXPECT_EQ(answers.size(), 1u);
    return answers[ref.uid];
  }

  // The node's GPUs from a copy of the description file that FakeDiscovery (the MIG backend of
  // these tests) rewrites; `edit` changes the copy first (MIG mode, configured instances).
  void UseFakeFile(const std::function<void(json&)>& edit) {
    const std::string source =
        std::string(TESSERA_SOURCE_DIR) + "/test/controlplane/gpus/h100-8x-nvswitch.json";
    json doc = json::parse(ReadText(source));
    edit(doc);
    fake_file_ = (dir_ / "gpus.json").string();
    std::ofstream(fake_file_) << doc.dump(1);
    fake_ = std::make_unique<FakeDiscovery>(fake_file_);
    options_.mig = fake_.get();
    Rediscover();
  }
  // What discovery finds now (as the agent's loop gives it to the driver).
  void Rediscover() {
    absl::StatusOr<NodeGpus> found = fake_->Discover();
    ASSERT_TRUE(found.ok()) << found.status();
    gpus_ = std::make_shared<const NodeGpus>(*found);
    pool_ = std::make_shared<const Pool>(
        BuildPool(*gpus_, {.node_name = "node-a", .mig_mode_switch = true}));
  }
  // The instances the description file lists on GPU `index`: "profile@start=uuid".
  std::vector<std::string> FileInstances(int index) {
    json doc = json::parse(ReadText(fake_file_));
    std::vector<std::string> out;
    for (const json& g : doc["gpus"]) {
      if (g["index"] != index) continue;
      for (const json& m : g["mig"].value("instances", json::array())) {
        out.push_back(StrCat(m["profile"].get<std::string>(), "@", m["start"].get<int>(), "=",
                             m.value("uuid", "")));
      }
    }
    return out;
  }
  bool FileMigEnabled(int index) {
    json doc = json::parse(ReadText(fake_file_));
    for (const json& g : doc["gpus"]) {
      if (g["index"] == index) return g["mig"].value("enabled", false);
    }
    return false;
  }
  static void EnableMig(json& doc, int index, json instances = json::array()) {
    for (json& g : doc["gpus"]) {
      if (g["index"] == index)
        g["mig"] = {{"capable", true}, {"enabled", true}, {"instances", instances}};
    }
  }

  json SpecOf(const std::string& uid) {
    return json::parse(ReadText(options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + uid + ".json"));
  }

  fs::path dir_;
  FakeClaims claims_;
  DriverOptions options_;
  std::shared_ptr<const NodeGpus> gpus_;
  std::shared_ptr<const Pool> pool_;
  RestoreReport report_;
  std::string fake_file_;
  std::unique_ptr<FakeDiscovery> fake_;
};

TEST_F(DriverTest, AWholeGpuClaimGetsItsDeviceNodeAndVisibleDevices) {
  auto d = NewDriver();
  claims_.claims["ns/whole"] = Claim("whole", 1, {{{"device", "gpu-3"}}});
  DraDriver::ClaimAnswer a = PrepareOne(*d, "whole");
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].device, "gpu-3");
  EXPECT_EQ(a.devices[0].pool, "node-a");
  EXPECT_EQ(a.devices[0].request, "gpu");
  EXPECT_TRUE(a.devices[0].exclusive);
  EXPECT_THAT(a.devices[0].cdi_ids, ElementsAre("k8s.gpu.tessera.dev/gpu=" + Uid(1) + "-gpu-3"));

  json spec = SpecOf(Uid(1));
  EXPECT_EQ(spec["cdiVersion"], "0.6.0");
  EXPECT_EQ(spec["kind"], "k8s.gpu.tessera.dev/gpu");
  ASSERT_EQ(spec["devices"].size(), 1u);
  EXPECT_EQ(spec["devices"][0]["name"], Uid(1) + "-gpu-3");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"],
            json::parse(R"([{"path": "/dev/nvidia3", "hostPath": "/hostdev/nvidia3", "type": "c",
                             "major": 195, "minor": 3, "permissions": "rw"}])"));
  EXPECT_EQ(spec["containerEdits"]["env"],
            json::parse(R"(["NVIDIA_VISIBLE_DEVICES=GPU-23eb7164-3ac5-c727-15d2-5341edc5fe85"])"));
  ASSERT_EQ(spec["containerEdits"]["deviceNodes"].size(), 2u);  // nvidiactl, nvidia-uvm
  EXPECT_EQ(spec["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidiactl");
  EXPECT_FALSE(spec["containerEdits"].contains("mounts")) << "no shim for a whole GPU";
  EXPECT_FALSE(fs::exists(fs::path(options_.claims_dir) / Uid(1)));

  // Idempotent: the kubelet asks again (a retry, a restart) and gets the same answer without the
  // claim being read again, even after it is gone from the API server.
  claims_.claims.erase("ns/whole");
  const int reads = claims_.reads;
  auto again = d->Prepare({{"ns", Uid(1), "whole"}});
  EXPECT_EQ(again[Uid(1)].error, "");
  EXPECT_EQ(again[Uid(1)].devices, a.devices);
  EXPECT_EQ(claims_.reads, reads);
  EXPECT_EQ(d->prepared_total(), 1);
}

TEST_F(DriverTest, AShareGetsTheShimItsSegmentsAndItsLimits) {
  auto d = NewDriver();
  claims_.claims["ns/share"] = Claim("share", 2, {Share("gpu-0", "4Gi", "25")});
  DraDriver::ClaimAnswer a = PrepareOne(*d, "share");
  ASSERT_EQ(a.error, "");
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_FALSE(a.devices[0].exclusive);
  EXPECT_EQ(a.devices[0].memory_mib, 4096);
  EXPECT_EQ(a.devices[0].compute_percent, 25);
  EXPECT_EQ(a.devices[0].share_id, "5a1e0000-0000-4000-8000-000000000001");

  // The shim's files: one segment with the share's caps.
  const std::string share_dir = options_.claims_dir + "/" + Uid(2);
  absl::StatusOr<std::unique_ptr<shim::Segment>> seg =
      shim::Segment::Open(share_dir, gpus_->gpus[0].spec.uuid);
  ASSERT_TRUE(seg.ok()) << seg.status();
  shim::SegmentInfo info = (*seg)->Inspect();
  EXPECT_EQ(info.limits.memory_limit_bytes, 4ULL << 30);
  EXPECT_EQ(info.limits.compute_limit_permille, 250u);
  EXPECT_EQ(info.pod_uid, Uid(2));

  json spec = SpecOf(Uid(2));
  const json& e = spec["containerEdits"];
  EXPECT_EQ(e["env"],
            json::parse(R"(["NVIDIA_VISIBLE_DEVICES=GPU-3fcb4b70-f79a-7ffc-e71b-9592244ececa",
                                      "TESSERA_GPU_SHARING=shim", "TESSERA_GPU_MEMORY_LIMIT_MIB=4096",
                                      "TESSERA_GPU_COMPUTE_PERCENT=25"])"));
  const std::string gpu0 = "GPU-3fcb4b70-f79a-7ffc-e71b-9592244ececa";
  std::vector<std::string> mounts;
  for (const json& m : e["mounts"]) {
    mounts.push_back(m["containerPath"].get<std::string>() + " <- " +
                     m["hostPath"].get<std::string>().substr(dir_.string().size()) + " " +
                     m["options"][0].get<std::string>());
  }
  EXPECT_THAT(
      mounts,
      ElementsAre(
          // The share's files one by one, never their folders: a container cannot create a
          // name on the host (no symlink planted for the agent to follow).
          "/run/tessera/limits/" + gpu0 + ".limits <- /claims/" + Uid(2) + "/limits/" + gpu0 +
              ".limits ro",
          "/run/tessera/ledger/" + gpu0 + ".ledger <- /claims/" + Uid(2) + "/ledger/" + gpu0 +
              ".ledger rw",
          "/usr/local/lib/tessera/libtessera-real-cuda.so.1 <- /lib/driver/libcuda.so.1 ro",
          "/usr/local/lib/tessera/libtessera-real-nvml.so.1 <- /lib/driver/libnvidia-ml.so.1 ro",
          "/usr/lib/x86_64-linux-gnu/libcuda.so.1 <- /lib/shim/libtessera-cuda.so ro",
          "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 <- /lib/shim/libtessera-nvml.so ro"));
  // The record rides along in the spec, for a checkpoint that cannot be read.
  EXPECT_TRUE(spec["annotations"].contains(kPreparedClaimAnnotation));

  // Nineteen 4Gi shares fit on this 81559 MiB GPU (twenty would not); more memory does not.
  for (int i = 0; i < 18; ++i) {
    const std::string name = StrCat("more-", i);
    claims_.claims["ns/" + name] = Claim(name, 100 + i, {Share("gpu-0", "4Gi", "")});
    ASSERT_EQ(PrepareOne(*d, name).error, "") << i;
  }
  claims_.claims["ns/too-much"] = Claim("too-much", 200, {Share("gpu-0", "10Gi", "")});
  EXPECT_THAT(PrepareOne(*d, "too-much").error,
              HasSubstr("would hold shares of 88064 MiB and 25% compute, more than its 81559 MiB"));
}

TEST_F(DriverTest, TheDriverIsTheLastGuardAgainstOneGpuForTwoClaims) {
  auto d = NewDriver();
  claims_.claims["ns/first"] = Claim("first", 3, {{{"device", "gpu-1"}}});
  ASSERT_EQ(PrepareOne(*d, "first").error, "");
  // The first claim was deleted while its pod runs, and gpu-1 allocated again.
  claims_.claims["ns/second"] = Claim("second", 4, {{{"device", "gpu-1"}}});
  std::string error = PrepareOne(*d, "second").error;
  EXPECT_THAT(error, HasSubstr("ResourceClaim ns/second (" + Uid(4) + "): device gpu-1 (GPU 1, "));
  EXPECT_THAT(error, HasSubstr("is still prepared on this node for ResourceClaim ns/first (" +
                               Uid(3) + "), used by pod ns/first-pod"));
  EXPECT_THAT(error, HasSubstr("delete that pod to free the GPU now"));
  EXPECT_FALSE(fs::exists(options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + Uid(4) + ".json"));
  // A share on it, or a MIG instance of it, is refused as well.
  claims_.claims["ns/share"] = Claim("share", 5, {Share("gpu-1", "1Gi", "")});
  EXPECT_THAT(PrepareOne(*d, "share").error, HasSubstr("still prepared on this node"));
  claims_.claims["ns/mig"] = Claim("mig", 6, {{{"device", "gpu-1-mig-1g-10gb-0"}}});
  EXPECT_THAT(PrepareOne(*d, "mig").error, HasSubstr("still prepared on this node"));
  EXPECT_EQ(d->refused_total(), 3);

  // Released by the kubelet when that pod ends: the second claim is prepared on its retry.
  auto released = d->Unprepare({{"ns", Uid(3), "first"}});
  EXPECT_EQ(released[Uid(3)], "");
  EXPECT_EQ(PrepareOne(*d, "second").error, "");
}

TEST_F(DriverTest, UnprepareRemovesEverythingAndForgetsTheClaim) {
  auto d = NewDriver();
  claims_.claims["ns/share"] = Claim("share", 7, {Share("gpu-2", "8Gi", "")});
  ASSERT_EQ(PrepareOne(*d, "share").error, "");
  const std::string spec = options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + Uid(7) + ".json";
  ASSERT_TRUE(fs::exists(spec));
  ASSERT_TRUE(fs::exists(options_.claims_dir + "/" + Uid(7)));
  auto out = d->Unprepare({{"ns", Uid(7), "share"}, {"ns", Uid(99), "never-prepared"}});
  EXPECT_EQ(out[Uid(7)], "");
  EXPECT_EQ(out[Uid(99)], "");
  EXPECT_FALSE(fs::exists(spec));
  EXPECT_FALSE(fs::exists(options_.claims_dir + "/" + Uid(7)));
  EXPECT_THAT(d->Prepared(), IsEmpty());
  json checkpoint = json::parse(ReadText(options_.checkpoint_path));
  EXPECT_EQ(checkpoint["claims"], json::array());
  EXPECT_EQ(checkpoint["node"], "node-a");
}

TEST_F(DriverTest, ARestartKeepsWhatIsPreparedAndRemovesWhatIsNot) {
  {
    auto d = NewDriver();
    claims_.claims["ns/a"] = Claim("a", 10, {{{"device", "gpu-4"}}});
    claims_.claims["ns/b"] = Claim("b", 11, {Share("gpu-5", "2Gi", "50")});
    ASSERT_EQ(PrepareOne(*d, "a").error, "");
    ASSERT_EQ(PrepareOne(*d, "b").error, "");
  }
  // Between the two lives: a's spec vanished (someone cleaned /var/run/cdi), and a crash left
  // files of a claim that was never recorded.
  fs::remove(options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + Uid(10) + ".json");
  std::ofstream(options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + Uid(12) + ".json") << "{}";
  fs::create_directories(options_.claims_dir + "/" + Uid(12) + "/limits");
  std::ofstream(options_.cdi_dir + "/nvidia.com-gpu.json") << "{}";  // not ours: left alone

  claims_.claims.clear();  // the plugin must not need the API server for what it prepared
  claims_.reads = 0;
  auto d = NewDriver();
  EXPECT_EQ(report_.claims, 2);
  EXPECT_EQ(report_.specs_rewritten, 1);
  EXPECT_EQ(report_.leaked_specs_removed, 1);
  EXPECT_EQ(report_.leaked_dirs_removed, 1);
  EXPECT_EQ(report_.checkpoint_error, "");
  EXPECT_TRUE(fs::exists(options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + Uid(10) + ".json"));
  EXPECT_FALSE(fs::exists(options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + Uid(12) + ".json"));
  EXPECT_FALSE(fs::exists(options_.claims_dir + "/" + Uid(12)));
  EXPECT_TRUE(fs::exists(options_.cdi_dir + "/nvidia.com-gpu.json"));
  // No double prepare: the kubelet's retry is answered from the record.
  auto again = d->Prepare({{"ns", Uid(10), "a"}, {"ns", Uid(11), "b"}});
  EXPECT_EQ(again[Uid(10)].error, "");
  EXPECT_EQ(again[Uid(11)].error, "");
  EXPECT_EQ(again[Uid(11)].devices[0].memory_mib, 2048);
  EXPECT_EQ(claims_.reads, 0);
  EXPECT_EQ(d->prepared_total(), 0);
  // And the guard still knows gpu-4 is taken.
  claims_.claims["ns/c"] = Claim("c", 13, {{{"device", "gpu-4"}}});
  EXPECT_THAT(PrepareOne(*d, "c").error,
              HasSubstr("still prepared on this node for ResourceClaim ns/a"));
}

TEST_F(DriverTest, AnUnreadableCheckpointIsRebuiltFromTheSpecs) {
  {
    auto d = NewDriver();
    claims_.claims["ns/a"] = Claim("a", 20, {{{"device", "gpu-6"}}});
    ASSERT_EQ(PrepareOne(*d, "a").error, "");
  }
  std::ofstream(options_.checkpoint_path) << "{\"version\": 1, \"claims\": [tru";
  auto d = NewDriver();
  EXPECT_THAT(report_.checkpoint_error, HasSubstr("not a JSON object"));
  EXPECT_THAT(report_.moved_to, HasSubstr("checkpoint.json.unreadable-"));
  EXPECT_TRUE(fs::exists(report_.moved_to));
  EXPECT_EQ(report_.claims, 1);
  ASSERT_EQ(d->Prepared().size(), 1u);
  EXPECT_EQ(d->Prepared()[0].name, "a");
  EXPECT_EQ(json::parse(ReadText(options_.checkpoint_path))["claims"].size(), 1u);
}

// Files the plugin reads back after a restart hold whatever a crash or another version left: a
// field of the wrong type is an error naming it, and the plugin carries on (the reads threw
// nlohmann's type_error before, which ended the plugin; found by dra_checkpoint_fuzz).
TEST(DraFiles, WrongTypesInTheCheckpointOrACdiSpecAreErrorsNotExceptions) {
  char tmpl[] = "/tmp/tessera-dra-files-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/checkpoint.json";
  for (
      const char* text :
      {R"({"version": "1", "node": "node-a"})", R"({"version": 1, "node": 7})",
       R"({"version": 1, "node": "node-a", "claims": [{"uid": 5}]})",
       R"({"version": 1, "node": "node-a", "claims": [{"uid": "u", "devices": [{"gpu_index": "x"}]}]})"}) {
    std::ofstream(path) << text;
    absl::StatusOr<CheckpointState> state = Checkpoint(path).Load("node-a");
    EXPECT_FALSE(state.ok()) << text;
  }
  const std::string cdi = dir + "/spec.json";
  for (const char* text :
       {R"({"kind": 5})", R"({"kind": "v/c", "devices": {"name": "x"}})",
        R"({"kind": "v/c", "devices": [7]})", R"({"kind": "v/c", "devices": [{"name": 7}]})",
        R"({"kind": "v/c", "devices": [{"name": "x", "containerEdits": {"deviceNodes": [1]}}]})"}) {
    std::ofstream(cdi) << text;
    absl::StatusOr<CdiSpec> spec = ReadCdiSpec(cdi);
    EXPECT_FALSE(spec.ok()) << text;
  }
  fs::remove_all(dir);
}

TEST_F(DriverTest, ClaimsThatCannotBePreparedSayWhy) {
  auto d = NewDriver();
  // Gone from the API server.
  auto gone = d->Prepare({{"ns", Uid(30), "gone"}});
  EXPECT_THAT(gone[Uid(30)].error, HasSubstr("ResourceClaim ns/gone (" + Uid(30) +
                                             ") no longer exists: delete the pod"));
  // Replaced under the same name.
  claims_.claims["ns/replaced"] = Claim("replaced", 31, {{{"device", "gpu-0"}}});
  auto replaced = d->Prepare({{"ns", Uid(32), "replaced"}});
  EXPECT_THAT(replaced[Uid(32)].error, HasSubstr("has UID " + Uid(31) + ", not " + Uid(32)));
  // Not allocated.
  claims_.claims["ns/pending"] = Claim("pending", 33, {});
  claims_.claims["ns/pending"]["status"].erase("allocation");
  EXPECT_THAT(PrepareOne(*d, "pending").error, HasSubstr("is not allocated"));
  // Another node's pool; a device the node does not publish.
  claims_.claims["ns/elsewhere"] =
      Claim("elsewhere", 34, {{{"device", "gpu-0"}, {"pool", "node-b"}}});
  EXPECT_THAT(PrepareOne(*d, "elsewhere").error,
              HasSubstr("device gpu-0 is in pool node-b, not in this node's pool node-a"));
  claims_.claims["ns/unknown"] = Claim("unknown", 35, {{{"device", "gpu-12"}}});
  EXPECT_THAT(PrepareOne(*d, "unknown").error,
              HasSubstr("device gpu-12 is not among the devices node node-a publishes"));
  // Opaque configuration for this driver.
  claims_.claims["ns/config"] = Claim("config", 36, {{{"device", "gpu-0"}}});
  claims_.claims["ns/config"]["status"]["allocation"]["devices"]["config"] = json::parse(
      R"([{"source": "FromClaim", "opaque": {"driver": "gpu.tessera.dev", "parameters": {}}}])");
  EXPECT_THAT(PrepareOne(*d, "config").error,
              HasSubstr("carries opaque configuration for gpu.tessera.dev (from its claim)"));
  // A bad consumed capacity.
  claims_.claims["ns/bad"] = Claim("bad", 37, {Share("gpu-0", "lots", "")});
  EXPECT_THAT(PrepareOne(*d, "bad").error, HasSubstr("consumedCapacity.memory \"lots\""));
  // A MIG placement on a GPU that is not in MIG mode (and the agent may not switch it).
  claims_.claims["ns/mig"] = Claim("mig", 38, {{{"device", "gpu-7-mig-3g-40gb-4"}}});
  EXPECT_THAT(PrepareOne(*d, "mig").error,
              HasSubstr("device gpu-7-mig-3g-40gb-4: GPU 7 "
                        "(GPU-89fb1806-dc3f-e287-2a16-2b8dc835698d) is not in MIG mode, so MIG "
                        "instance 3g.40gb@4 cannot be created on it: turn MIG mode on "
                        "(nvidia-smi -i 7 -mig 1"));
  EXPECT_THAT(d->Prepared(), IsEmpty());
  EXPECT_THAT(ListTransientSpecIds(options_.cdi_dir, kCdiVendor, kCdiClass), IsEmpty());
  EXPECT_FALSE(fs::exists(options_.claims_dir + "/" + Uid(38)));
}

// A MIG placement on a GPU in MIG mode: the instance is created when the claim is prepared (its
// MIG-<uuid> in the container's NVIDIA_VISIBLE_DEVICES, its GPU's device node), survives a
// restart of the agent without a second one, and is destroyed when the claim is unprepared.
TEST_F(DriverTest, AMigClaimCreatesItsInstanceAndUnprepareDestroysIt) {
  UseFakeFile([](json& doc) { EnableMig(doc, 1); });
  const std::string gpu1 = gpus_->gpus[1].spec.uuid;
  const std::string mig_uuid = FakeMigUuid(gpu1, "3g.40gb", 4);
  auto d = NewDriver();
  claims_.claims["ns/mig"] = Claim("mig", 40, {{{"device", "gpu-1-mig-3g-40gb-4"}}});
  DraDriver::ClaimAnswer answer = PrepareOne(*d, "mig");
  ASSERT_EQ(answer.error, "");
  EXPECT_THAT(FileInstances(1), ElementsAre("3g.40gb@4=" + mig_uuid));
  ASSERT_EQ(answer.devices.size(), 1u);
  EXPECT_TRUE(answer.devices[0].mig_created);
  EXPECT_EQ(answer.devices[0].mig_uuid, mig_uuid);
  EXPECT_THAT(answer.devices[0].cdi_ids,
              ElementsAre("k8s.gpu.tessera.dev/gpu=" + Uid(40) + "-gpu-1-mig-3g-40gb-4"));
  json spec = SpecOf(Uid(40));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"], "/dev/nvidia1");
  EXPECT_THAT(spec["containerEdits"]["env"].dump(),
              HasSubstr("NVIDIA_VISIBLE_DEVICES=" + mig_uuid + "\""));
  EXPECT_THAT(spec["containerEdits"]["env"].dump(), ::testing::Not(HasSubstr("TESSERA_GPU")));
  json checkpoint = json::parse(ReadText(options_.checkpoint_path));
  EXPECT_EQ(checkpoint["mig_instances"],
            json::parse(R"([{"gpu": ")" + gpu1 + R"(", "profile": "3g.40gb", "start": 4}])"));

  // The agent restarts (discovery sees the instance now): the claim is answered from the record.
  Rediscover();
  d = NewDriver();
  EXPECT_EQ(report_.claims, 1);
  answer = PrepareOne(*d, "mig");
  ASSERT_EQ(answer.error, "");
  EXPECT_EQ(answer.devices[0].mig_uuid, mig_uuid);
  EXPECT_THAT(FileInstances(1), ElementsAre("3g.40gb@4=" + mig_uuid));  // not a second one
  // Another placement that overlaps it is refused; one beside it is created.
  claims_.claims["ns/over"] = Claim("over", 41, {{{"device", "gpu-1-mig-1g-10gb-5"}}});
  EXPECT_THAT(PrepareOne(*d, "over").error, HasSubstr("still prepared on this node"));
  claims_.claims["ns/beside"] = Claim("beside", 42, {{{"device", "gpu-1-mig-2g-20gb-0"}}});
  ASSERT_EQ(PrepareOne(*d, "beside").error, "");
  EXPECT_EQ(FileInstances(1).size(), 2u);

  // Unprepared: the instances go, MIG mode stays (an administrator turned it on).
  EXPECT_EQ(d->Unprepare({{"ns", Uid(40), "mig"}, {"ns", Uid(42), "beside"}})[Uid(40)], "");
  EXPECT_THAT(FileInstances(1), IsEmpty());
  EXPECT_TRUE(FileMigEnabled(1));
  checkpoint = json::parse(ReadText(options_.checkpoint_path));
  EXPECT_EQ(checkpoint["mig_instances"], json::array());
  EXPECT_THAT(ListTransientSpecIds(options_.cdi_dir, kCdiVendor, kCdiClass), IsEmpty());
}

// MIG mode: refused with what to do, unless the agent may switch it; then it is turned on for the
// claim and off again when the GPU's last instance goes.
TEST_F(DriverTest, AGpuNotInMigModeIsSwitchedOnlyWhenThePolicyAllowsIt) {
  UseFakeFile([](json&) {});
  auto d = NewDriver();
  claims_.claims["ns/mig"] = Claim("mig", 50, {{{"device", "gpu-2-mig-1g-10gb-3"}}});
  EXPECT_THAT(PrepareOne(*d, "mig").error,
              HasSubstr("is not in MIG mode, so MIG instance 1g.10gb@3 cannot be created on it"));
  EXPECT_THAT(PrepareOne(*d, "mig").error, HasSubstr("--dra-mig-mode-switch"));
  EXPECT_FALSE(FileMigEnabled(2));

  options_.mig_mode_switch = true;
  d = NewDriver();
  ASSERT_EQ(PrepareOne(*d, "mig").error, "");
  EXPECT_TRUE(FileMigEnabled(2));
  EXPECT_EQ(FileInstances(2).size(), 1u);
  json checkpoint = json::parse(ReadText(options_.checkpoint_path));
  EXPECT_EQ(checkpoint["mig_mode_gpus"], json::array({gpus_->gpus[2].spec.uuid}));
  // While it is in MIG mode, a whole-GPU claim of it is refused by the driver as well.
  claims_.claims["ns/whole"] = Claim("whole", 51, {{{"device", "gpu-2"}}});
  EXPECT_THAT(PrepareOne(*d, "whole").error, HasSubstr("still prepared on this node"));

  EXPECT_EQ(d->Unprepare({{"ns", Uid(50), "mig"}})[Uid(50)], "");
  EXPECT_THAT(FileInstances(2), IsEmpty());
  EXPECT_FALSE(FileMigEnabled(2));
  checkpoint = json::parse(ReadText(options_.checkpoint_path));
  EXPECT_EQ(checkpoint["mig_mode_gpus"], json::array());
}

// Instances someone else configured: the allocated one is used as it is and kept afterwards; one
// in the way is never destroyed (the claim says which and how to free it). Without a backend that
// can create instances, only configured ones are served.
TEST_F(DriverTest, InstancesConfiguredByOthersAreUsedButNeverDestroyed) {
  UseFakeFile([](json& doc) {
    EnableMig(doc, 3, json::parse(R"([{"profile": "1g.10gb", "start": 6},
                                      {"profile": "2g.20gb", "start": 4}])"));
  });
  auto d = NewDriver();
  claims_.claims["ns/taken"] = Claim("taken", 60, {{{"device", "gpu-3-mig-1g-10gb-6"}}});
  DraDriver::ClaimAnswer answer = PrepareOne(*d, "taken");
  ASSERT_EQ(answer.error, "");
  EXPECT_FALSE(answer.devices[0].mig_created);
  EXPECT_EQ(answer.devices[0].mig_uuid, FakeMigUuid(gpus_->gpus[3].spec.uuid, "1g.10gb", 6));
  claims_.claims["ns/blocked"] = Claim("blocked", 61, {{{"device", "gpu-3-mig-1g-10gb-5"}}});
  EXPECT_THAT(PrepareOne(*d, "blocked").error, HasSubstr("has MIG instance 2g.20gb@4 (MIG-"));
  EXPECT_THAT(PrepareOne(*d, "blocked").error,
              HasSubstr("was not created by tessera's DRA driver: destroy it"));
  EXPECT_EQ(d->Unprepare({{"ns", Uid(60), "taken"}})[Uid(60)], "");
  EXPECT_EQ(FileInstances(3).size(), 2u);  // kept

  options_.mig = nullptr;  // a backend that cannot change MIG
  d = NewDriver();
  ASSERT_EQ(PrepareOne(*d, "taken").error, "");
  claims_.claims["ns/new"] = Claim("new", 62, {{{"device", "gpu-3-mig-1g-10gb-0"}}});
  EXPECT_THAT(PrepareOne(*d, "new").error,
              HasSubstr("MIG instance 1g.10gb@0 is not configured on GPU 3"));
  EXPECT_THAT(PrepareOne(*d, "new").error, HasSubstr("cannot create MIG instances"));
}

// A crash between creating an instance and recording the claim: the restart destroys the
// instance (no claim holds it), and the kubelet's retry creates it again, once.
TEST_F(DriverTest, AnInstanceCreatedBeforeACrashIsNotLeaked) {
  UseFakeFile(
      [](json& doc) { EnableMig(doc, 4, json::parse(R"([{"profile": "2g.20gb", "start": 2}])")); });
  const std::string gpu4 = gpus_->gpus[4].spec.uuid;
  fs::create_directories(fs::path(options_.checkpoint_path).parent_path());
  std::ofstream(options_.checkpoint_path)
      << json{{"version", 1},
              {"node", "node-a"},
              {"claims", json::array()},
              {"mig_instances", {{{"gpu", gpu4}, {"profile", "2g.20gb"}, {"start", 2}}}}}
             .dump();
  auto d = NewDriver();
  EXPECT_THAT(FileInstances(4), IsEmpty());
  json checkpoint = json::parse(ReadText(options_.checkpoint_path));
  EXPECT_EQ(checkpoint["mig_instances"], json::array());
  claims_.claims["ns/retry"] = Claim("retry", 70, {{{"device", "gpu-4-mig-2g-20gb-2"}}});
  ASSERT_EQ(PrepareOne(*d, "retry").error, "");
  EXPECT_EQ(FileInstances(4).size(), 1u);
}

TEST_F(DriverTest, AShareWithoutTheShimInstalledIsRefusedUnlessEnforcementIsOff) {
  fs::remove(dir_ / "lib/shim/libtessera-nvml.so");
  auto d = NewDriver();
  claims_.claims["ns/share"] = Claim("share", 40, {Share("gpu-0", "4Gi", "")});
  std::string error = PrepareOne(*d, "share").error;
  EXPECT_THAT(error, HasSubstr("the NVML shim " + (dir_ / "lib/shim/libtessera-nvml.so").string() +
                               " is missing on this node: the share cannot be enforced"));
  EXPECT_THAT(error, HasSubstr("--share-enforcement=none"));
  EXPECT_FALSE(fs::exists(options_.claims_dir + "/" + Uid(40)));

  options_.edits.shares.shim = false;
  auto unenforced = NewDriver();
  ASSERT_EQ(PrepareOne(*unenforced, "share").error, "");
  json spec = SpecOf(Uid(40));
  EXPECT_FALSE(spec["containerEdits"].contains("mounts"));
  EXPECT_THAT(spec["containerEdits"]["env"].dump(), HasSubstr("TESSERA_GPU_MEMORY_LIMIT_MIB=4096"));
}

TEST_F(DriverTest, HealthFollowsTheGpus) {
  auto d = NewDriver();
  uint64_t v0 = 0;
  std::vector<DeviceHealthInfo> health = d->Health(&v0);
  EXPECT_EQ(health.size(), pool_->devices.size());
  NodeGpus sick = *gpus_;
  sick.gpus[2].health = {false, {79}, "XID 79: GPU has fallen off the bus"};
  auto sick_gpus = std::make_shared<const NodeGpus>(sick);
  d->SetGpus(sick_gpus, std::make_shared<const Pool>(
                            BuildPool(sick, {.node_name = "node-a", .mig_mode_switch = true})));
  EXPECT_TRUE(d->WaitForHealthChange(v0, std::chrono::milliseconds(0)));
  uint64_t v1 = 0;
  health = d->Health(&v1);
  EXPECT_NE(v1, v0);
  int bad = 0;
  for (const DeviceHealthInfo& h : health) {
    if (!h.healthy) {
      ++bad;
      EXPECT_EQ(h.message, "XID 79: GPU has fallen off the bus");
    }
  }
  EXPECT_EQ(bad, 26);  // gpu-2 and its 25 MIG placements
  // The same again changes nothing.
  d->SetGpus(sick_gpus, std::make_shared<const Pool>(
                            BuildPool(sick, {.node_name = "node-a", .mig_mode_switch = true})));
  EXPECT_FALSE(d->WaitForHealthChange(v1, std::chrono::milliseconds(0)));
}

TEST(Consumption, FromTheAllocationResult) {
  auto c = ConsumptionOf(json::parse(R"({"consumedCapacity": {"memory": "4Gi", "compute": "30"}})"),
                         81920);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->exclusive);
  EXPECT_EQ(c->memory_mib, 4096);
  EXPECT_EQ(c->compute_percent, 30);
  c = ConsumptionOf(json::parse(R"({"consumedCapacity": {"memory": "80Gi", "compute": "0"}})"),
                    81920);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->exclusive);  // a request without capacity: the default is all the memory
  EXPECT_EQ(c->compute_percent, 100);
  c = ConsumptionOf(json::parse(R"({"device": "gpu-0"})"), 81920);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->exclusive);
  EXPECT_FALSE(
      ConsumptionOf(json::parse(R"({"consumedCapacity": {"memory": "1Gi", "compute": "101"}})"),
                    81920)
          .ok());
}

}  // namespace
}  // namespace tessera::agent::dra
