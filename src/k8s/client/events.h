// core/v1 Events: the one shape every tessera component posts about an object (the scheduler about
// pods it cannot place, the agent about pods on a failed GPU, the DRA plugin about claims deleted
// under a running pod), so that `kubectl describe` and `kubectl get events` show them alike, as
// client-go's event recorder writes them.
//
// Example: PostEvent(client, {.object = PodRef("team-a", "trainer-0", uid), .reason =
// "GPUUnhealthy", .message = "GPU 3 ... is unhealthy: XID 79"}, {"tessera-agent", "node-a",
// "node-a"}) posts a Warning named "trainer-0.<random suffix>" in team-a.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

class ApiClient;

// The object an Event is about (involvedObject).
struct ObjectRef {
  std::string api_version = "v1";
  std::string kind = "Pod";
  std::string ns;
  std::string name;
  std::string uid;
  std::string resource_version;  // optional
};
inline ObjectRef PodRef(std::string ns, std::string name, std::string uid) {
  return ObjectRef{.ns = std::move(ns), .name = std::move(name), .uid = std::move(uid)};
}

// Who reports: `component` (source.component, reportingComponent), `instance`
// (reportingInstance: a node name or a pod name) and `host` (source.host, empty for none).
struct EventSource {
  std::string component;
  std::string instance;
  std::string host;
};

struct EventSpec {
  ObjectRef object;
  std::string reason;            // CamelCase, machine-readable: "FailedScheduling", "GPUUnhealthy"
  std::string message;           // for a person: what happened and what to do
  std::string type = "Warning";  // or "Normal"
  std::string action;            // optional (events.k8s.io's action), e.g. "Scheduling"
};

// The Event object. `name` empty: metadata.generateName "<object>." (the API server adds a
// suffix); otherwise that exact name (a caller that later PATCHes the count names it).
nlohmann::json EventJson(const EventSpec& spec, const EventSource& source,
                         std::chrono::system_clock::time_point now, const std::string& name = "");

// A name unique for `object` at `now`, as client-go's recorder makes them ("<name>.<hex nanos>").
std::string EventName(const ObjectRef& object, std::chrono::system_clock::time_point now);

// The events path of a namespace: /api/v1/namespaces/<ns>/events.
std::string EventsPath(const std::string& ns);

// Posts the Event (generateName) now. A 404 (the namespace is gone) is not an error: there is
// nobody left to tell.
[[nodiscard]] absl::Status PostEvent(ApiClient& client, const EventSpec& spec,
                                     const EventSource& source);

}  // namespace tessera::k8s
