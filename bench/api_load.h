// What the benchmarks that load a real API server share (k8s_bench, dra_bench): a client from a
// kubeconfig, a stopwatch in seconds, and a Runner that keeps many requests in flight and exits
// the program if any fails (a benchmark whose load did not arrive measures nothing).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "common/strings.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"

namespace tessera::k8s::bench {

// The client for `kubeconfig`; exits 2 with the reason when there is none.
inline std::unique_ptr<ApiClient> Connect(const std::string& kubeconfig) {
  absl::StatusOr<ClientConfig> config = LoadKubeconfig(kubeconfig);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    std::exit(2);
  }
  auto client = ApiClient::Create(*config);
  if (!client.ok()) {
    std::cerr << client.status().message() << "\n";
    std::exit(2);
  }
  return std::move(*client);
}

inline double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Runs requests with `concurrency` in flight. A failed request is printed (the first five) and
// Wait exits 1 if any failed; with `conflict_ok`, 409 (the object is already there: a rerun on
// the same cluster) counts as done.
class Runner {
 public:
  Runner(ApiClient& client, int concurrency, bool conflict_ok = false)
      : async_(client.transport(), AsyncClientOptions{concurrency, 8, {}, true}),
        conflict_ok_(conflict_ok) {}
  void Submit(HttpRequest r, std::function<void(const HttpResponse&)> then = nullptr) {
    async_.Submit(r, [this, r, then](const HttpResponse& resp) {
      if (!resp.ok() && !(conflict_ok_ && resp.status == 409)) {
        if (failures_++ < 5) {
          std::cerr << FromAbsl(StatusFromResponse(r, resp).message()) << "\n";
        }
      } else if (then) {
        then(resp);
      }
      ++done_;
    });
  }
  void Wait() {
    async_.Drain(std::chrono::hours(1));
    if (failures_ > 0) {
      std::cerr << failures_ << " requests failed\n";
      std::exit(1);
    }
  }
  int done() const { return done_; }

 private:
  AsyncClient async_;
  const bool conflict_ok_;
  std::atomic<int> failures_{0};
  std::atomic<int> done_{0};
};

}  // namespace tessera::k8s::bench
