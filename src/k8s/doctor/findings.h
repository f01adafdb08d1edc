// What `tessera doctor` reports: one Finding per thing checked, each saying what is wrong, why it
// matters and the exact command or value that fixes it, so a person can act on every line. The
// node's checks (agent/doctor) and the cluster's (k8s/doctor) both produce these; rendering and
// the exit status are decided here once.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace tessera::k8s {

enum class Severity { kOk, kWarning, kError };
std::string_view SeverityName(Severity s);  // "ok", "warning", "error"

struct Finding {
  std::string check;  // a stable name: "nri-socket", "pod-security", "dra-api"
  Severity severity = Severity::kOk;
  std::string object;  // what it is about: "node/gpu-a", "namespace/tessera-system"; "" for none
  std::string what;    // what was found (wrong, or fine)
  std::string why;     // why it matters (empty when ok)
  std::string fix;     // the command or value that fixes it (empty when ok)
};

struct DoctorReport {
  std::string scope;   // "node" or "cluster"
  std::string target;  // the node's name, or the API server
  std::vector<Finding> findings;

  int errors() const;
  int warnings() const;
};

// For people: errors first, then warnings, then what is fine; each problem with its why and fix.
std::string RenderDoctorText(const DoctorReport& report);
// {"version": 1, "scope", "target", "errors", "warnings", "findings": [{"check", "severity",
// "object", "what", "why", "fix"}]}: fields are only ever added.
nlohmann::json DoctorToJson(const DoctorReport& report);

}  // namespace tessera::k8s
