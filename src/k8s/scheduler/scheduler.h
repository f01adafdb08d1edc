// The live scheduler: SchedulerCore wired to the API server.
//
// Threads (STYLE.md "Concurrency"): one watch thread each for Nodes and Pods (decode, keep the
// informer cache, enqueue); the scheduler thread, which alone owns the SchedulerCore and its
// engine and applies events in order; the writer thread (an AsyncClient, many binds and status
// writes in flight, whose answers are enqueued back); the leader elector; the HTTP server for
// /metrics, /healthz and /readyz.
//
// Writes: a placement is bound with one POST .../pods/NAME/binding whose metadata.annotations
// carry tessera.dev/assignment. The API server copies a Binding's annotations onto the pod in the
// same storage update that sets spec.nodeName (BindingREST.setPodNodeAndMetadata in
// pkg/registry/core/pod/storage/storage.go, Kubernetes 1.37.2), so the assignment record and the
// binding land atomically: there is never a pod with one and not the other. Failures write a
// PodScheduled=False condition (strategic merge patch on pods/status) and a FailedScheduling
// Event (core/v1; repeats bump its count).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "k8s/client/http.h"
#include "k8s/client/informer.h"
#include "k8s/scheduler/config.h"
#include "k8s/scheduler/metrics.h"

namespace tessera::k8s {

// The families the running scheduler adds to its SchedulerMetrics: its informers' lists and
// watches, and its requests to the API server (docs_reference_test lists them with no informers).
void WriteSchedulerClientMetrics(const std::vector<const ListWatch*>& informers,
                                 const RequestCounts& requests, prometheus::Exposition& out);

class Scheduler {
 public:
  Scheduler(ApiClient& client, SchedulerConfig config);
  ~Scheduler();

  // Runs until `stop` is set (OK), or this replica loses its lease or a fatal error occurs (an
  // error). Blocks.
  absl::Status Run(const std::atomic<bool>& stop);

  const SchedulerMetrics& metrics() const { return metrics_; }

 private:
  ApiClient& client_;
  SchedulerConfig config_;
  SchedulerMetrics metrics_;
};

}  // namespace tessera::k8s
