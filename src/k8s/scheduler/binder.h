// What a decision becomes on the API server. The scheduler decides; a Binder writes the decision
// and tells SchedulerCore::OnBindResult(key, attempt, status) how it went, later (perhaps after the
// watch already showed the pod bound). One Binder per way of recording what a pod was granted:
// the annotation binder of classic mode here; DRA mode adds a claim binder beside it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "k8s/client/http.h"
#include "k8s/scheduler/objects.h"
#include "nlohmann/json.hpp"
#include "records/assignment.h"

namespace tessera::k8s {

class Binder {
 public:
  virtual ~Binder() = default;
  // Binds `pod` to `assignment.node` with what `assignment` grants; the outcome of attempt
  // `attempt` comes back asynchronously.
  virtual void Bind(const PodInfo& pod, const records::Assignment& assignment,
                    uint64_t attempt) = 0;
};

// Classic mode: one POST .../pods/NAME/binding whose metadata.annotations carry the
// tessera.dev/assignment record. The API server copies a Binding's annotations onto the pod in
// the same storage update that sets spec.nodeName (BindingREST.setPodNodeAndMetadata in
// pkg/registry/core/pod/storage/storage.go, Kubernetes 1.37.2), so the record and the binding
// land atomically: there is never a pod with one and not the other.
class AnnotationBinder final : public Binder {
 public:
  using Done = std::function<void(const std::string& key, uint64_t attempt, absl::Status status)>;
  // `done` runs on the client's thread: it must only hand the outcome over.
  AnnotationBinder(AsyncClient& client, Done done) : client_(client), done_(std::move(done)) {}

  void Bind(const PodInfo& pod, const records::Assignment& assignment, uint64_t attempt) override;

  // The request Bind sends.
  static HttpRequest BindingRequest(const PodInfo& pod, const records::Assignment& assignment);

 private:
  AsyncClient& client_;
  Done done_;
};

}  // namespace tessera::k8s
