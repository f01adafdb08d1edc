// The kubelet plugin of the DRA driver gpu.tessera.dev over gRPC: the kubelet's side of
// driver.h. Two unix sockets under the kubelet's root directory (the paths the kubelet's own
// kubeletplugin helper uses):
//   <kubelet dir>/plugins_registry/gpu.tessera.dev-reg.sock   pluginregistration.Registration:
//       the kubelet's plugin watcher finds the socket, asks GetInfo (type DRAPlugin, the driver
//       name, the service socket, the services "v1.DRAPlugin" and "v1.DRAResourceHealth") and
//       reports the outcome with NotifyRegistrationStatus; a restarted kubelet finds the socket
//       again and registers the plugin again.
//   <kubelet dir>/plugins/gpu.tessera.dev/dra.sock   k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin
//       (NodePrepareResources, NodeUnprepareResources) and v1.DRAResourceHealth
//       (NodeWatchResources: every device's health at once, again on every change and at least
//       every `health_resend`, so the kubelet never counts a device as Unknown).
// Stale sockets of an earlier run are removed before listening; Stop removes both sockets, so
// the kubelet forgets the plugin (and, after its grace period, the node's slices) only when the
// agent really stops.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "agent/dra/driver.h"

namespace grpc {
class Server;
}

namespace tessera::agent::dra {

struct PluginServerOptions {
  std::string kubelet_dir = "/var/lib/kubelet";
  // Called (on a gRPC thread) whenever the kubelet reports a successful registration: a
  // kubelet that (re)started has deleted the node's ResourceSlices, so they are published again.
  std::function<void()> on_registered;
  std::chrono::seconds health_resend{30};
};

// Under the kubelet's root directory: the folder of the driver's DRA socket
// (<kubelet dir>/plugins/gpu.tessera.dev) and its registration socket
// (<kubelet dir>/plugins_registry/gpu.tessera.dev-reg.sock).
std::string DraSocketDir(std::string_view kubelet_dir);
std::string RegistrationSocketPath(std::string_view kubelet_dir);

class PluginServer {
 public:
  PluginServer(DraDriver& driver, PluginServerOptions options);
  ~PluginServer();
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  // Creates the folders, removes stale sockets, listens on both. Errors name the socket.
  [[nodiscard]] absl::Status Start();
  // Ends the health streams, stops serving and removes the sockets. Idempotent.
  void Stop();

  std::string dra_socket() const;
  std::string registration_socket() const;
  int64_t registrations() const { return registrations_.load(); }
  std::string last_registration_error() const;

 private:
  class Services;
  DraDriver& driver_;
  PluginServerOptions options_;
  std::unique_ptr<Services> services_;
  std::unique_ptr<grpc::Server> dra_server_;
  std::unique_ptr<grpc::Server> registration_server_;
  std::atomic<int64_t> registrations_{0};
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::string last_registration_error_;
};

}  // namespace tessera::agent::dra
