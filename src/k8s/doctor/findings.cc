#include "k8s/doctor/findings.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::k8s {

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kOk:
      return "ok";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
  }
  return "?";
}

int DoctorReport::errors() const {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(), [](const Finding& f) {
    return f.severity == Severity::kError;
  }));
}

int DoctorReport::warnings() const {
  return static_cast<int>(std::count_if(findings.begin(), findings.end(), [](const Finding& f) {
    return f.severity == Severity::kWarning;
  }));
}

std::string RenderDoctorText(const DoctorReport& r) {
  std::string out = StrCat("tessera doctor ", r.scope, ": ", r.target, "\n");
  for (Severity s : {Severity::kError, Severity::kWarning, Severity::kOk}) {
    for (const Finding& f : r.findings) {
      if (f.severity != s) continue;
      const std::string_view tag = s == Severity::kError     ? "ERROR"
                                   : s == Severity::kWarning ? "WARN "
                                                             : "ok   ";
      StrAppend(&out, "\n", tag, " ", f.check, f.object.empty() ? "" : StrCat(" (", f.object, ")"),
                ": ", f.what, "\n");
      if (!f.why.empty()) StrAppend(&out, "      why: ", f.why, "\n");
      if (!f.fix.empty()) StrAppend(&out, "      fix: ", f.fix, "\n");
    }
  }
  const int e = r.errors(), w = r.warnings();
  StrAppend(&out, "\n",
            e == 0 && w == 0 ? "all checks passed"
                             : StrCat(e, e == 1 ? " error" : " errors", ", ", w,
                                      w == 1 ? " warning" : " warnings"),
            " (", r.findings.size(), " checks)\n");
  return out;
}

nlohmann::json DoctorToJson(const DoctorReport& r) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : r.findings) {
    findings.push_back({{"check", f.check},
                        {"severity", SeverityName(f.severity)},
                        {"object", f.object},
                        {"what", f.what},
                        {"why", f.why},
                        {"fix", f.fix}});
  }
  return {{"version", 1},         {"scope", r.scope},         {"target", r.target},
          {"errors", r.errors()}, {"warnings", r.warnings()}, {"findings", std::move(findings)}};
}

}  // namespace tessera::k8s
