// An NRI plugin: connects to the runtime's NRI socket (containerd 2.x:
// /var/run/nri/nri.sock by default), registers, and answers the runtime's calls through an
// NriHandler. The wire: NRI's multiplexer (mux.h) over the unix socket, ttrpc (ttrpc.h) on each
// logical connection, NRI's messages (nri_api.h).
//
// The session, as NRI's own plugin stub runs it:
//   1. the plugin connects and calls Runtime.RegisterPlugin(name, index) on connection 2;
//   2. the runtime calls Plugin.Configure (the plugin answers with the events it wants),
//      then Plugin.Synchronize with the pods and containers it has (possibly in several parts,
//      `more` set on all but the last), on connection 1;
//   3. then one call per subscribed event: CreateContainer (the answer adjusts the container:
//      environment, devices, mounts, CDI devices), RemovePodSandbox, ...; Shutdown when the
//      runtime stops.
// An error answer to CreateContainer fails the container's creation with that message (the
// kubelet reports it as an Event and retries). The runtime waits at most its request timeout
// (2 s by default) for an answer: a plugin that is slower is disconnected and the container is
// created without it, so handlers must not block on the network.
//
// Run() reconnects (after common/backoff.h's delays) when the runtime restarts or the socket is not
// there yet. One thread serves one connection; the handler is called on it, one call at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/nri/nri_api.h"
#include "records/required_plugins.h"

namespace tessera::agent::nri {

class NriHandler {
 public:
  virtual ~NriHandler() = default;
  // The adjustment for a container being created (empty: leave it alone), or an error that fails
  // its creation.
  virtual absl::StatusOr<ContainerAdjustment> CreateContainer(const PodSandbox& pod,
                                                              const Container& container) = 0;
  // The pods and containers the runtime already has, once per connection.
  virtual void Synchronize(const std::vector<PodSandbox>& /*pods*/,
                           const std::vector<Container>& /*containers*/) {}
  // Every container of the pod has stopped (a finished pod stays stopped until it is removed).
  virtual void StopPodSandbox(const PodSandbox& /*pod*/) {}
  virtual void RemovePodSandbox(const PodSandbox& /*pod*/) {}
};

struct NriPluginOptions {
  std::string socket_path = "/var/run/nri/nri.sock";
  // [A-Za-z0-9_.+-]+; the name the scheduler asks containerd to require
  // (records/required_plugins.h)
  std::string name = std::string(records::kAgentNriPluginName);
  std::string index = "50";  // two digits: plugins are called in index order
  std::chrono::milliseconds reconnect_min{200};
  std::chrono::milliseconds reconnect_max{10'000};
};

class NriPlugin {
 public:
  NriPlugin(NriPluginOptions options, NriHandler& handler);

  // Serves one connection: connect, register, answer calls until the runtime closes the
  // connection (OK), `stop` is set (OK), or the protocol breaks (an error).
  absl::Status ServeOnce(const std::atomic<bool>& stop);
  // ServeOnce again and again until `stop`, waiting between attempts (backoff); logs why each
  // connection ended.
  void Run(const std::atomic<bool>& stop);

  // Counters, for logs and tests.
  int64_t connections() const { return connections_.load(); }
  int64_t registered() const { return registered_.load(); }
  int64_t create_calls() const { return create_calls_.load(); }
  int32_t subscribed_events() const { return events_; }

 private:
  NriPluginOptions options_;
  NriHandler& handler_;
  int32_t events_ =
      EventBit(kCreateContainer) | EventBit(kStopPodSandbox) | EventBit(kRemovePodSandbox);
  std::atomic<int64_t> connections_{0}, registered_{0}, create_calls_{0};
};

}  // namespace tessera::agent::nri
