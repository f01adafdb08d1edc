// The Grafana dashboard (deploy/helm/tessera/dashboards/tessera.json) against live /metrics: every
// metric a panel queries is served, and every label it groups by ("by (a, b)") is on a served
// series. Shared by operator_e2e_test (a scheduler's /metrics) and helm_install_e2e_test (the
// installed scheduler's and agent's).
#pragma once

#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {

// Every "expr" of the dashboard's panels (and variables); empty if the file is not JSON.
inline std::vector<std::string> DashboardQueries() {
  std::ifstream in(StrCat(TESSERA_SOURCE_DIR, "/deploy/helm/tessera/dashboards/tessera.json"));
  nlohmann::json dashboard = nlohmann::json::parse(in, nullptr, false);
  std::vector<std::string> exprs;
  if (dashboard.is_discarded()) return exprs;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "expr" && v.is_string()) exprs.push_back(v);
        walk(v);
      }
    } else if (j.is_array()) {
      for (const nlohmann::json& v : j) walk(v);
    }
  };
  walk(dashboard);
  return exprs;
}

struct DashboardCheck {
  std::set<std::string> metrics;      // the metrics checked
  std::vector<std::string> problems;  // one line per metric or label not served
};

// Checks the queries whose metrics start with `prefix` ("tessera_scheduler_", or "tessera_" for
// all) against `metrics_text` (the /metrics bodies of everything that serves them, joined).
inline DashboardCheck CheckDashboard(const std::vector<std::string>& exprs,
                                     const std::string& metrics_text, const std::string& prefix) {
  DashboardCheck out;
  const std::string text = "\n" + metrics_text;
  const std::regex metric("tessera_[a-z_]+");
  const std::regex by("by \\(([a-z_, ]+)\\)");
  for (const std::string& e : exprs) {
    bool ours = false;
    for (auto it = std::sregex_iterator(e.begin(), e.end(), metric); it != std::sregex_iterator();
         ++it) {
      const std::string name = it->str();
      if (!name.starts_with(prefix)) continue;
      ours = true;
      out.metrics.insert(name);
      if (text.find(StrCat("\n", name, "{")) == std::string::npos &&
          text.find(StrCat("\n", name, " ")) == std::string::npos) {
        out.problems.push_back(StrCat(name, " (in ", e, ") is not in /metrics"));
      }
    }
    if (!ours) continue;
    for (auto it = std::sregex_iterator(e.begin(), e.end(), by); it != std::sregex_iterator();
         ++it) {
      std::istringstream labels((*it)[1].str());
      for (std::string l; std::getline(labels, l, ',');) {
        l.erase(0, l.find_first_not_of(' '));
        l.erase(l.find_last_not_of(' ') + 1);
        if (text.find(StrCat(l, "=\"")) == std::string::npos) {
          out.problems.push_back(StrCat("label ", l, " (in ", e, ") is on no metric"));
        }
      }
    }
  }
  return out;
}

}  // namespace tessera::e2e
