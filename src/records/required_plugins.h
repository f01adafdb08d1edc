// Fail closed, a name of the Kubernetes-facing contract (beside records/names.h): the scheduler
// writes, in the Binding of a pod it gives GPUs (so the API server puts it on the pod with the
// assignment), the annotation that containerd's NRI default validator reads
// (github.com/containerd/nri v0.12.3, pkg/plugin/annotations.go RequiredPluginsAnnotation, pod
// scope "/pod"), naming the agent's NRI plugin (its registered name, agent/nri/plugin.h). With the
// validator on ([plugins.'io.containerd.nri.v1.nri'.default_validator] enable = true), a
// container of such a pod created while the agent is down fails ("required plugin "tessera" not
// present") and the kubelet retries it, instead of starting it without its GPUs.
#pragma once

#include <string_view>

namespace tessera::records {

inline constexpr std::string_view kRequiredNriPluginsAnnotation =
    "required-plugins.noderesource.dev/pod";
inline constexpr std::string_view kAgentNriPluginName = "tessera";

}  // namespace tessera::records
