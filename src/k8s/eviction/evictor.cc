#include "k8s/eviction/evictor.h"

#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

std::string_view EvictionOutcomeName(EvictionOutcome o) {
  switch (o) {
    case EvictionOutcome::kEvicted:
      return "evicted";
    case EvictionOutcome::kBudget:
      return "refused by a disruption budget";
    case EvictionOutcome::kGone:
      return "gone";
    case EvictionOutcome::kFailed:
      return "failed";
  }
  return "?";
}

HttpRequest ApiEvictor::EvictionRequest(const EvictionTarget& target) {
  nlohmann::json body = {{"apiVersion", "policy/v1"},
                         {"kind", "Eviction"},
                         {"metadata", {{"name", target.name}, {"namespace", target.ns}}}};
  nlohmann::json options = nlohmann::json::object();
  if (!target.uid.empty()) options["preconditions"] = {{"uid", target.uid}};
  if (target.grace_seconds) options["gracePeriodSeconds"] = *target.grace_seconds;
  if (!options.empty()) body["deleteOptions"] = options;
  return HttpRequest{"POST",
                     StrCat("/api/v1/namespaces/", target.ns, "/pods/", target.name, "/eviction"),
                     body.dump(), "application/json"};
}

EvictionResult ApiEvictor::Classify(const HttpRequest& request, const HttpResponse& response) {
  EvictionResult r;
  if (response.ok()) {
    r.outcome = EvictionOutcome::kEvicted;
    return r;
  }
  r.message = std::string(FromAbsl(StatusFromResponse(request, response).message()));
  switch (response.status) {
    case 429:
      r.outcome = EvictionOutcome::kBudget;
      break;
    case 404:
    case 409:  // the uid precondition: another pod of that name now
      r.outcome = EvictionOutcome::kGone;
      break;
    default:
      r.outcome = EvictionOutcome::kFailed;
  }
  return r;
}

void ApiEvictor::Evict(const EvictionTarget& target, Done done) {
  HttpRequest req = EvictionRequest(target);
  client_.Submit(req, [req, target, done = std::move(done)](const HttpResponse& r) {
    done(target, Classify(req, r));
  });
}

}  // namespace tessera::k8s
