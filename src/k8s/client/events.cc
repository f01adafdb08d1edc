#include "k8s/client/events.h"

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "k8s/client/http.h"
#include "k8s/client/leader_election.h"  // FormatTime

namespace tessera::k8s {

std::string EventName(const ObjectRef& object, std::chrono::system_clock::time_point now) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch());
  return fmt::format("{}.{:x}", object.name, ns.count());
}

std::string EventsPath(const std::string& ns) {
  return absl::StrCat("/api/v1/namespaces/", ns, "/events");
}

nlohmann::json EventJson(const EventSpec& spec, const EventSource& source,
                         std::chrono::system_clock::time_point now, const std::string& name) {
  const ObjectRef& o = spec.object;
  nlohmann::json involved = {
      {"apiVersion", o.api_version}, {"kind", o.kind}, {"name", o.name}, {"uid", o.uid}};
  if (!o.ns.empty()) involved["namespace"] = o.ns;
  if (!o.resource_version.empty()) involved["resourceVersion"] = o.resource_version;
  nlohmann::json metadata = {{"namespace", o.ns.empty() ? std::string("default") : o.ns}};
  if (name.empty()) {
    metadata["generateName"] = absl::StrCat(o.name, ".");
  } else {
    metadata["name"] = name;
  }
  nlohmann::json src = {{"component", source.component}};
  if (!source.host.empty()) src["host"] = source.host;
  const std::string now_text = FormatTime(now);
  nlohmann::json event = {{"apiVersion", "v1"},
                          {"kind", "Event"},
                          {"metadata", std::move(metadata)},
                          {"involvedObject", std::move(involved)},
                          {"reason", spec.reason},
                          {"message", spec.message},
                          {"type", spec.type},
                          {"source", std::move(src)},
                          {"firstTimestamp", now_text},
                          {"lastTimestamp", now_text},
                          {"count", 1},
                          {"reportingComponent", source.component},
                          {"reportingInstance", source.instance}};
  if (!spec.action.empty()) event["action"] = spec.action;
  return event;
}

absl::Status PostEvent(ApiClient& client, const EventSpec& spec, const EventSource& source) {
  const nlohmann::json event = EventJson(spec, source, std::chrono::system_clock::now());
  absl::StatusOr<nlohmann::json> posted =
      client.Create(EventsPath(event["metadata"]["namespace"].get<std::string>()), event);
  if (posted.ok() || absl::IsNotFound(posted.status())) return absl::OkStatus();
  return absl::Status(
      posted.status().code(),
      absl::StrCat("posting Event ", spec.reason, " about ", spec.object.kind, " ", spec.object.ns,
                   "/", spec.object.name, ": ", posted.status().message()));
}

}  // namespace tessera::k8s
