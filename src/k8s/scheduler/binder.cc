#include "k8s/scheduler/binder.h"

#include "common/strings.h"
#include "records/required_plugins.h"

namespace tessera::k8s {

HttpRequest AnnotationBinder::BindingRequest(const PodInfo& pod,
                                             const records::Assignment& assignment) {
  nlohmann::json annotations = {
      {std::string(records::kAssignmentAnnotation), records::AssignmentToJson(assignment)}};
  // Fail closed: no container of a GPU pod starts without the agent (records/required_plugins.h).
  if (!assignment.gpus.empty()) {
    annotations[std::string(records::kRequiredNriPluginsAnnotation)] =
        nlohmann::json::array({records::kAgentNriPluginName}).dump();
  }
  return HttpRequest{"POST", StrCat("/api/v1/namespaces/", pod.ns, "/pods/", pod.name, "/binding"),
                     BindingBody(pod.ns, pod.name, pod.uid, assignment.node, annotations).dump(),
                     "application/json"};
}

void AnnotationBinder::Bind(const PodInfo& pod, const records::Assignment& assignment,
                            uint64_t attempt) {
  HttpRequest req = BindingRequest(pod, assignment);
  client_.Submit(req, [this, req, key = pod.key, attempt](const HttpResponse& r) {
    done_(key, attempt, StatusFromResponse(req, r));
  });
}

}  // namespace tessera::k8s
