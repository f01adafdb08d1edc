// Evicting pods the way Kubernetes means it: through the Eviction API (POST
// /api/v1/namespaces/NS/pods/NAME/eviction, policy/v1). The API server checks the pod's
// PodDisruptionBudgets and answers 429 TooManyRequests while one allows no disruption now, and
// deletes the pod gracefully: its containers get their terminationGracePeriodSeconds (or the
// grace the caller gives) before they are killed. The pod's uid is a precondition, so a pod
// deleted and created again under the same name is never evicted by mistake.
//
// One owner of evictions for every planner that moves pods: preemption and reclaim in the
// scheduler, defragmentation (tessera plan defrag's executor). The planner decides whom; an
// Evictor carries it out and says how each one went. Asynchronous: the answer comes back on the
// client's thread, which must only hand it over.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "k8s/client/http.h"

namespace tessera::k8s {

struct EvictionTarget {
  std::string ns, name, uid;  // uid: a precondition when not empty
  // Seconds the pod gets to stop; nullopt: its own terminationGracePeriodSeconds.
  std::optional<int64_t> grace_seconds;
};

enum class EvictionOutcome {
  kEvicted,  // accepted: the pod is terminating (gracefully)
  kBudget,   // a PodDisruptionBudget allows no disruption now (429); try later or elsewhere
  kGone,     // the pod is gone already, or it is another pod now (404, uid precondition 409)
  kFailed,   // anything else (permissions, the server); `message` says what
};
std::string_view EvictionOutcomeName(EvictionOutcome o);

struct EvictionResult {
  EvictionOutcome outcome = EvictionOutcome::kFailed;
  std::string message;  // the API server's words (empty when evicted)
};

class Evictor {
 public:
  using Done = std::function<void(const EvictionTarget&, const EvictionResult&)>;
  virtual ~Evictor() = default;
  virtual void Evict(const EvictionTarget& target, Done done) = 0;
};

class ApiEvictor final : public Evictor {
 public:
  // Transient answers (connection errors, 5xx) are retried inside `client`; so are 429s, a few
  // times with back-off, before kBudget is reported.
  explicit ApiEvictor(AsyncClient& client) : client_(client) {}
  void Evict(const EvictionTarget& target, Done done) override;

  // The request Evict sends, and how its answer is read.
  static HttpRequest EvictionRequest(const EvictionTarget& target);
  static EvictionResult Classify(const HttpRequest& request, const HttpResponse& response);

 private:
  AsyncClient& client_;
};

}  // namespace tessera::k8s
