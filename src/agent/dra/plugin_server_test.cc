// The kubelet plugin's gRPC side, called over its unix sockets the way the kubelet calls it
// (same method paths and messages: the protos are the kubelet's wire).
#include "agent/dra/plugin_server.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/discovery/fake_gpus_file.h"
#include "agent/dra/driver_testing.h"
#include "agent/dra/names.h"
#include "common/strings.h"
#include "dra_health_v1.grpc.pb.h"
#include "dra_v1.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pluginregistration.grpc.pb.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
namespace drapb = ::k8s::io::kubelet::pkg::apis::dra::v1;
using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A prepared share's ledger folder is a tmpfs, mounted in this test's own mount namespace (as for
// the driver's other tests, driver_testing.h) and unmounted with the test's folder
// (RemoveTestTree).
using testing::kPrivateMounts;

class FakeClaims : public ClaimSource {
 public:
  absl::StatusOr<json> GetClaim(const std::string& ns, const std::string& name) override {
    auto it = claims.find(ns + "/" + name);
    if (it == claims.end()) return absl::NotFoundError("not found");
    return it->second;
  }
  std::map<std::string, json> claims;
};

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr char kUid[] = "0e1c2a9e-0000-4000-8000-000000000001";

class PluginServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: unix socket paths are limited to 107 bytes.
    ASSERT_TRUE(kPrivateMounts) << "the test needs a mount namespace of its own (root)";
    dir_ = fs::path("/tmp") / StrCat("tdra-", getpid());
    shim::RemoveTestTree(dir_);
    const std::string path =
        std::string(TESSERA_SOURCE_DIR) + "/test/controlplane/gpus/h100-8x-nvswitch.json";
    absl::StatusOr<NodeGpus> gpus = ParseFakeGpusFile(ReadText(path), path);
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    gpus_ = std::make_shared<const NodeGpus>(*gpus);
    options_.node_name = "node-a";
    options_.cdi_dir = (dir_ / "cdi").string();
    options_.claims_dir = (dir_ / "claims").string();
    options_.checkpoint_path = (dir_ / "kubelet/plugins/gpu.tessera.dev/checkpoint.json").string();
    options_.edits.lookup = [](const std::string& p) -> absl::StatusOr<DeviceNumber> {
      if (p.find("nvidia-uvm") != std::string::npos) return absl::NotFoundError(p);
      return DeviceNumber{'c', 195, p.find("ctl") != std::string::npos ? 255 : 3};
    };
    for (const char* f : {"lib/shim/libtessera-cuda.so", "lib/shim/libtessera-nvml.so",
                          "lib/driver/libcuda.so.1", "lib/driver/libnvidia-ml.so.1"}) {
      fs::create_directories((dir_ / f).parent_path());
      std::ofstream(dir_ / f) << "ELF";
    }
    options_.edits.shares.shim_dir = (dir_ / "lib/shim").string();
    options_.edits.shares.driver_lib_dir = (dir_ / "lib/driver").string();
    driver_ = std::make_unique<DraDriver>(claims_, options_);
    driver_->SetGpus(gpus_, std::make_shared<const Pool>(BuildPool(
                                *gpus_, {.node_name = "node-a", .mig_mode_switch = true})));
    ASSERT_TRUE(driver_->Restore().ok());
    server_ = std::make_unique<PluginServer>(
        *driver_, PluginServerOptions{.kubelet_dir = (dir_ / "kubelet").string(),
                                      .on_registered = [this] { ++registered_; }});
    // A stale socket of an earlier run does not stop the start.
    fs::create_directories(dir_ / "kubelet/plugins_registry");
    std::ofstream(server_->registration_socket()) << "stale";
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override {
    server_.reset();
    shim::RemoveTestTree(dir_);
  }

  std::shared_ptr<grpc::Channel> Dial(const std::string& socket) {
    return grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  }

  fs::path dir_;
  FakeClaims claims_;
  DriverOptions options_;
  std::shared_ptr<const NodeGpus> gpus_;
  std::unique_ptr<DraDriver> driver_;
  std::unique_ptr<PluginServer> server_;
  std::atomic<int> registered_{0};
};

TEST_F(PluginServerTest, RegistersAsTheKubeletsPluginWatcherExpects) {
  EXPECT_EQ(server_->registration_socket(),
            (dir_ / "kubelet/plugins_registry/gpu.tessera.dev-reg.sock").string());
  EXPECT_EQ(server_->dra_socket(), (dir_ / "kubelet/plugins/gpu.tessera.dev/dra.sock").string());
  auto reg = pluginregistration::Registration::NewStub(Dial(server_->registration_socket()));
  grpc::ClientContext ctx;
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(reg->GetInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "gpu.tessera.dev");
  EXPECT_EQ(info.endpoint(), server_->dra_socket());
  EXPECT_THAT(info.supported_versions(), ElementsAre("v1.DRAPlugin", "v1.DRAResourceHealth"));

  pluginregistration::RegistrationStatus refused;
  refused.set_plugin_registered(false);
  refused.set_error("no such service");
  pluginregistration::RegistrationStatusResponse r;
  grpc::ClientContext ctx2;
  ASSERT_TRUE(reg->NotifyRegistrationStatus(&ctx2, refused, &r).ok());
  EXPECT_EQ(server_->last_registration_error(), "no such service");
  EXPECT_EQ(registered_.load(), 0);
  pluginregistration::RegistrationStatus ok;
  ok.set_plugin_registered(true);
  grpc::ClientContext ctx3;
  ASSERT_TRUE(reg->NotifyRegistrationStatus(&ctx3, ok, &r).ok());
  EXPECT_EQ(registered_.load(), 1);
  EXPECT_EQ(server_->registrations(), 1);
  EXPECT_EQ(server_->last_registration_error(), "");

  server_->Stop();
  EXPECT_FALSE(fs::exists(server_->registration_socket()));
  EXPECT_FALSE(fs::exists(server_->dra_socket()));
}

TEST_F(PluginServerTest, PrepareAndUnprepareOverTheWire) {
  claims_.claims["ns/c"] =
      json::parse(StrCat(R"({"metadata": {"name": "c", "namespace": "ns", "uid": ")", kUid, R"("},
      "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.tessera.dev",
        "pool": "node-a", "device": "gpu-2", "shareID": "5a1e0000-0000-4000-8000-000000000001",
        "consumedCapacity": {"memory": "4Gi", "compute": "0"}}]}},
      "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}})"));
  auto dra = drapb::DRAPlugin::NewStub(Dial(server_->dra_socket()));
  drapb::NodePrepareResourcesRequest req;
  drapb::Claim* c = req.add_claims();
  c->set_namespace_("ns");
  c->set_uid(kUid);
  c->set_name("c");
  drapb::Claim* gone = req.add_claims();
  gone->set_namespace_("ns");
  gone->set_uid("0e1c2a9e-0000-4000-8000-000000000002");
  gone->set_name("gone");
  drapb::NodePrepareResourcesResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(dra->NodePrepareResources(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.claims().size(), 2u);
  const drapb::NodePrepareResourceResponse& failed =
      resp.claims().at("0e1c2a9e-0000-4000-8000-000000000002");
  EXPECT_THAT(failed.error(), HasSubstr("ResourceClaim ns/gone"));
  const drapb::NodePrepareResourceResponse& prepared = resp.claims().at(kUid);
  ASSERT_EQ(prepared.error(), "");
  ASSERT_EQ(prepared.devices_size(), 1);
  EXPECT_EQ(prepared.devices(0).pool_name(), "node-a");
  EXPECT_EQ(prepared.devices(0).device_name(), "gpu-2");
  EXPECT_THAT(prepared.devices(0).request_names(), ElementsAre("gpu"));
  EXPECT_EQ(prepared.devices(0).share_id(), "5a1e0000-0000-4000-8000-000000000001");
  EXPECT_THAT(prepared.devices(0).cdi_device_ids(),
              ElementsAre(StrCat("k8s.gpu.tessera.dev/gpu=", kUid, "-gpu-2")));
}

TEST_F(PluginServerTest, WholeGpuPrepareUnprepareAndHealthStream) {
  claims_.claims["ns/c"] =
      json::parse(StrCat(R"({"metadata": {"name": "c", "namespace": "ns", "uid": ")", kUid, R"("},
      "status": {"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.tessera.dev",
        "pool": "node-a", "device": "gpu-5"}]}}}})"));
  auto dra = drapb::DRAPlugin::NewStub(Dial(server_->dra_socket()));
  drapb::NodePrepareResourcesRequest req;
  drapb::Claim* c = req.add_claims();
  c->set_namespace_("ns");
  c->set_uid(kUid);
  c->set_name("c");
  for (int round = 0; round < 2; ++round) {  // the second is the kubelet's retry: same answer
    drapb::NodePrepareResourcesResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(dra->NodePrepareResources(&ctx, req, &resp).ok());
    const drapb::NodePrepareResourceResponse& r = resp.claims().at(kUid);
    ASSERT_EQ(r.error(), "");
    ASSERT_EQ(r.devices_size(), 1);
    EXPECT_FALSE(r.devices(0).has_share_id());
    EXPECT_THAT(r.devices(0).cdi_device_ids(),
                ElementsAre(StrCat("k8s.gpu.tessera.dev/gpu=", kUid, "-gpu-5")));
  }
  EXPECT_EQ(driver_->prepared_total(), 1);
  const std::string spec = options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + kUid + ".json";
  EXPECT_THAT(ReadText(spec), HasSubstr("NVIDIA_VISIBLE_DEVICES=" + gpus_->gpus[5].spec.uuid));

  drapb::NodeUnprepareResourcesRequest ureq;
  *ureq.add_claims() = *c;
  for (int round = 0; round < 2; ++round) {
    drapb::NodeUnprepareResourcesResponse uresp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(dra->NodeUnprepareResources(&ctx, ureq, &uresp).ok());
    ASSERT_EQ(uresp.claims().count(kUid), 1u);
    EXPECT_EQ(uresp.claims().at(kUid).error(), "");
  }
  EXPECT_FALSE(fs::exists(spec));
  EXPECT_EQ(driver_->unprepared_total(), 1);

  // Health: every published device at once, then again when a GPU turns unhealthy.
  auto health = v1::DRAResourceHealth::NewStub(Dial(server_->dra_socket()));
  grpc::ClientContext hctx;
  auto stream = health->NodeWatchResources(&hctx, {});
  v1::NodeWatchResourcesResponse first;
  ASSERT_TRUE(stream->Read(&first));
  EXPECT_EQ(first.devices_size(), 208);
  EXPECT_EQ(first.devices(0).device().pool_name(), "node-a");
  EXPECT_EQ(first.devices(0).health(), v1::HEALTHY);
  NodeGpus sick = *gpus_;
  sick.gpus[1].health = {false, {79}, "XID 79: GPU has fallen off the bus"};
  driver_->SetGpus(std::make_shared<const NodeGpus>(sick),
                   std::make_shared<const Pool>(
                       BuildPool(sick, {.node_name = "node-a", .mig_mode_switch = true})));
  v1::NodeWatchResourcesResponse second;
  ASSERT_TRUE(stream->Read(&second));
  int unhealthy = 0;
  for (const v1::DeviceHealth& d : second.devices()) {
    if (d.health() == v1::UNHEALTHY) {
      ++unhealthy;
      EXPECT_EQ(d.message(), "XID 79: GPU has fallen off the bus");
      EXPECT_THAT(d.device().device_name(), HasSubstr("gpu-1"));
    }
  }
  EXPECT_EQ(unhealthy, 26);
  hctx.TryCancel();
}

}  // namespace
}  // namespace tessera::agent::dra
