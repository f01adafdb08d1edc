#include "agent/dra/plugin_server.h"

#include <grpcpp/grpcpp.h>

#include <ctime>
#include <filesystem>

#include "agent/dra/names.h"
#include "common/strings.h"
#include "dra_health_v1.grpc.pb.h"
#include "dra_v1.grpc.pb.h"
#include "pluginregistration.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
namespace drapb = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace healthpb = ::v1;
namespace regpb = ::pluginregistration;

// The service names the kubelet knows (k8s.io/kubelet pkg/apis/dra/v1 DRAPluginService,
// dra-health/v1 DRAResourceHealthService).
constexpr char kDraService[] = "v1.DRAPlugin";
constexpr char kHealthService[] = "v1.DRAResourceHealth";
constexpr size_t kMaxHealthMessage = 1024;

std::vector<ClaimRef> Refs(const google::protobuf::RepeatedPtrField<drapb::Claim>& claims) {
  std::vector<ClaimRef> out;
  for (const drapb::Claim& c : claims) out.push_back({c.namespace_(), c.uid(), c.name()});
  return out;
}

absl::Status RemoveStaleSocket(const std::string& path) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) {
    return absl::FailedPreconditionError(
        StrCat("cannot create ", fs::path(path).parent_path().string(), ": ", ec.message()));
  }
  fs::remove(path, ec);
  if (ec)
    return absl::FailedPreconditionError(
        StrCat("cannot remove stale socket ", path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

class PluginServer::Services final : public drapb::DRAPlugin::Service,
                                     public healthpb::DRAResourceHealth::Service,
                                     public regpb::Registration::Service {
 public:
  explicit Services(PluginServer& server) : server_(server) {}

  grpc::Status NodePrepareResources(grpc::ServerContext*,
                                    const drapb::NodePrepareResourcesRequest* req,
                                    drapb::NodePrepareResourcesResponse* resp) override {
    std::map<std::string, DraDriver::ClaimAnswer> answers =
        server_.driver_.Prepare(Refs(req->claims()));
    for (auto& [uid, answer] : answers) {
      drapb::NodePrepareResourceResponse& r = (*resp->mutable_claims())[uid];
      if (!answer.error.empty()) {
        r.set_error(answer.error);
        continue;
      }
      for (const PreparedDevice& d : answer.devices) {
        drapb::Device* out = r.add_devices();
        if (!d.request.empty()) out->add_request_names(d.request);
        out->set_pool_name(d.pool);
        out->set_device_name(d.device);
        for (const std::string& id : d.cdi_ids) out->add_cdi_device_ids(id);
        if (!d.share_id.empty()) out->set_share_id(d.share_id);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeUnprepareResources(grpc::ServerContext*,
                                      const drapb::NodeUnprepareResourcesRequest* req,
                                      drapb::NodeUnprepareResourcesResponse* resp) override {
    for (const auto& [uid, error] : server_.driver_.Unprepare(Refs(req->claims()))) {
      (*resp->mutable_claims())[uid].set_error(error);
    }
    return grpc::Status::OK;
  }

  grpc::Status NodeWatchResources(
      grpc::ServerContext* context, const healthpb::NodeWatchResourcesRequest*,
      grpc::ServerWriter<healthpb::NodeWatchResourcesResponse>* writer) override {
    spdlog::info("dra: the kubelet watches device health");
    uint64_t seen = 0;
    auto last_sent = std::chrono::steady_clock::time_point::min();
    bool first = true;
    while (!context->IsCancelled() && !server_.stopping_.load()) {
      const bool changed =
          first || server_.driver_.WaitForHealthChange(seen, std::chrono::seconds(1));
      if (!changed &&
          std::chrono::steady_clock::now() - last_sent < server_.options_.health_resend) {
        continue;
      }
      first = false;
      uint64_t version = 0;
      std::vector<DeviceHealthInfo> health = server_.driver_.Health(&version);
      seen = version;
      healthpb::NodeWatchResourcesResponse resp;
      const std::string pool = server_.driver_.pool_name();
      const int64_t now = static_cast<int64_t>(std::time(nullptr));
      for (const DeviceHealthInfo& h : health) {
        healthpb::DeviceHealth* d = resp.add_devices();
        d->mutable_device()->set_pool_name(pool);
        d->mutable_device()->set_device_name(h.device);
        d->set_health(h.healthy ? healthpb::HEALTHY : healthpb::UNHEALTHY);
        d->set_last_updated_time(now);
        d->set_health_check_timeout_seconds(
            static_cast<int64_t>(server_.options_.health_resend.count()) * 3);
        if (!h.message.empty()) d->set_message(h.message.substr(0, kMaxHealthMessage));
      }
      if (!writer->Write(resp)) break;
      last_sent = std::chrono::steady_clock::now();
    }
    spdlog::info("dra: the kubelet's health watch ended");
    return grpc::Status::OK;
  }

  grpc::Status GetInfo(grpc::ServerContext*, const regpb::InfoRequest*,
                       regpb::PluginInfo* info) override {
    info->set_type("DRAPlugin");
    info->set_name(std::string(records::dra::kDriverName));
    info->set_endpoint(server_.dra_socket());
    info->add_supported_versions(kDraService);
    info->add_supported_versions(kHealthService);
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const regpb::RegistrationStatus* status,
                                        regpb::RegistrationStatusResponse*) override {
    if (status->plugin_registered()) {
      ++server_.registrations_;
      spdlog::info("dra: registered with the kubelet as {}", records::dra::kDriverName);
      {
        std::lock_guard<std::mutex> lock(server_.mu_);
        server_.last_registration_error_.clear();
      }
      if (server_.options_.on_registered) server_.options_.on_registered();
    } else {
      spdlog::error("dra: the kubelet refused the plugin's registration: {}", status->error());
      std::lock_guard<std::mutex> lock(server_.mu_);
      server_.last_registration_error_ = status->error();
    }
    return grpc::Status::OK;
  }

 private:
  PluginServer& server_;
};

PluginServer::PluginServer(DraDriver& driver, PluginServerOptions options)
    : driver_(driver), options_(std::move(options)), services_(std::make_unique<Services>(*this)) {}

PluginServer::~PluginServer() { Stop(); }

std::string DraSocketDir(std::string_view kubelet_dir) {
  return StrCat(kubelet_dir, "/", kPluginsSubdir, "/", records::dra::kDriverName);
}

std::string RegistrationSocketPath(std::string_view kubelet_dir) {
  return StrCat(kubelet_dir, "/", kRegistrySubdir, "/", records::dra::kDriverName, "-reg.sock");
}

std::string PluginServer::dra_socket() const {
  return StrCat(DraSocketDir(options_.kubelet_dir), "/dra.sock");
}

std::string PluginServer::registration_socket() const {
  return RegistrationSocketPath(options_.kubelet_dir);
}

std::string PluginServer::last_registration_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_registration_error_;
}

absl::Status PluginServer::Start() {
  stopping_.store(false);
  // The service socket first: the kubelet dials it as soon as it sees the registration socket.
  const std::string dra = dra_socket();
  const std::string reg = registration_socket();
  for (const std::string& path : {dra, reg}) {
    if (path.size() > 107) {
      return absl::InvalidArgumentError(
          StrCat("socket path ", path,
                 " is longer than the 107 "
                 "bytes a unix socket allows: shorten --kubelet-dir"));
    }
    absl::Status removed = RemoveStaleSocket(path);
    if (!removed.ok()) return removed;
  }
  auto serve = [](const std::string& path, std::initializer_list<grpc::Service*> services)
      -> absl::StatusOr<std::unique_ptr<grpc::Server>> {
    grpc::ServerBuilder builder;
    int bound = 0;
    builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials(), &bound);
    for (grpc::Service* s : services) builder.RegisterService(s);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server || bound == 0) {
      return absl::UnavailableError(
          StrCat("cannot listen on ", path, " (is the kubelet's plugins directory writable?)"));
    }
    return server;
  };
  absl::StatusOr<std::unique_ptr<grpc::Server>> dra_server =
      serve(dra, {static_cast<drapb::DRAPlugin::Service*>(services_.get()),
                  static_cast<healthpb::DRAResourceHealth::Service*>(services_.get())});
  if (!dra_server.ok()) return dra_server.status();
  dra_server_ = std::move(*dra_server);
  absl::StatusOr<std::unique_ptr<grpc::Server>> reg_server =
      serve(reg, {static_cast<regpb::Registration::Service*>(services_.get())});
  if (!reg_server.ok()) {
    Stop();
    return reg_server.status();
  }
  registration_server_ = std::move(*reg_server);
  spdlog::info("dra: kubelet plugin {} serving {}, registration {}", records::dra::kDriverName, dra,
               reg);
  return absl::OkStatus();
}

void PluginServer::Stop() {
  stopping_.store(true);
  // The registration socket first, so that the kubelet stops calling.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(5);
  if (registration_server_) {
    registration_server_->Shutdown(deadline);
    registration_server_.reset();
    std::error_code ec;
    fs::remove(registration_socket(), ec);
  }
  if (dra_server_) {
    dra_server_->Shutdown(deadline);
    dra_server_.reset();
    std::error_code ec;
    fs::remove(dra_socket(), ec);
  }
}

}  // namespace tessera::agent::dra
