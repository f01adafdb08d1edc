// The reference pages that must not drift from the code are generated from it, and this test
// fails when a page and the code differ (run it with TESSERA_UPDATE_DOCS=1 to rewrite the
// generated parts, then read the diff):
//   - docs/metrics.md: every family the scheduler and the agent serve, from what their writers
//     declare (common/prometheus.h keeps each family's name, type, labels and help);
//   - docs/configuration.md: every key of the scheduler's configuration file
//     (k8s/scheduler/config_keys.h, the list the parser checks keys against) and every flag of
//     `tessera scheduler` and `tessera agent` (their CLI11 definitions).
// A generated part sits between "<!-- generated: NAME -->" and "<!-- end generated: NAME -->".
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "CLI/CLI.hpp"
#include "agent/metrics/agent_metrics.h"
#include "cli/command.h"
#include "common/prometheus.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/config_keys.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/scheduler.h"

namespace tessera {
namespace {

using prometheus::FamilySpec;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A Markdown table cell: pipes escaped, one line.
std::string Cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string MetricsTable(const std::vector<FamilySpec>& families) {
  std::string out = "| series | type | labels | what |\n| --- | --- | --- | --- |\n";
  for (const FamilySpec& f : families) {
    std::vector<std::string> labels;
    for (const std::string& l : f.labels) labels.push_back(StrCat("`", l, "`"));
    StrAppend(&out, "| `", f.name, "` | ", prometheus::TypeName(f.type), " | ",
              labels.empty() ? "" : StrJoin(labels, ", "), " | ", Cell(f.help), " |\n");
  }
  return out;
}

// The scheduler's families: everything its /metrics declares (the scale-up signal's included,
// which appear once templates are configured), and what the running scheduler adds.
std::vector<FamilySpec> SchedulerFamilies() {
  k8s::SchedulerMetrics m;
  m.SetScaleUp({}, 0);
  k8s::RequestCounts none;
  m.SetExtra(
      [&none](prometheus::Exposition& out) { k8s::WriteSchedulerClientMetrics({}, none, out); });
  prometheus::Exposition out;
  m.Write(out);
  return out.families();
}

std::vector<FamilySpec> AgentFamilies() {
  k8s::RequestCounts none;
  agent::AgentMetricsInput in;
  in.requests = &none;
  prometheus::Exposition out;
  agent::WriteAgentMetrics(out, in);
  return out.families();
}

std::string ConfigTable() {
  std::string out = "| key | type | default | what |\n| --- | --- | --- | --- |\n";
  for (const k8s::ConfigKey& k : k8s::SchedulerConfigKeys()) {
    StrAppend(&out, "| `", k.path, "` | ", k.type, " | ",
              k.default_value.empty() ? "" : StrCat("`", Cell(k.default_value), "`"), " | ",
              Cell(k.description), " |\n");
  }
  return out;
}

std::string FlagsTable(const CLI::App& command) {
  std::string out = "| flag | default | what |\n| --- | --- | --- |\n";
  for (const CLI::Option* o : command.get_options()) {
    if (o->get_lnames().empty() || o->get_lnames()[0] == "help") continue;
    std::string flag = StrCat("--", o->get_lnames()[0]);
    if (o->get_expected_min() > 0) StrAppend(&flag, " ", o->get_type_name());
    StrAppend(&out, "| `", flag, "` | ",
              o->get_default_str().empty() ? "" : StrCat("`", Cell(o->get_default_str()), "`"),
              " | ", Cell(o->get_description()), o->get_required() ? " (required)" : "", " |\n");
  }
  return out;
}

// The subcommand `path` ("agent", "agent uninstall") of the tessera binary's command line.
const CLI::App& Command(CLI::App& app, const std::vector<std::string>& path) {
  const CLI::App* at = &app;
  for (const std::string& p : path) at = const_cast<CLI::App*>(at)->get_subcommand(p);
  return *at;
}

// Compares (or, with TESSERA_UPDATE_DOCS=1, rewrites) the part NAME of the page.
void CheckGenerated(const std::string& page, const std::string& name, const std::string& body) {
  const std::string path = StrCat(TESSERA_SOURCE_DIR, "/", page);
  std::string text = ReadFile(path);
  const std::string begin = StrCat("<!-- generated: ", name, " -->\n");
  const std::string end = StrCat("<!-- end generated: ", name, " -->");
  const size_t b = text.find(begin);
  const size_t e = text.find(end);
  ASSERT_NE(b, std::string::npos) << page << " has no \"" << begin << "\"";
  ASSERT_NE(e, std::string::npos) << page << " has no \"" << end << "\"";
  const std::string have = text.substr(b + begin.size(), e - b - begin.size());
  if (have == body) return;
  const char* update = std::getenv("TESSERA_UPDATE_DOCS");
  if (update != nullptr && std::string(update) == "1") {
    text.replace(b + begin.size(), e - b - begin.size(), body);
    std::ofstream(path) << text;
    std::cout << "rewrote " << page << " (" << name << ")\n";
    return;
  }
  ADD_FAILURE() << page << " (" << name << ") differs from the code. Rewrite it with\n"
                << "  TESSERA_UPDATE_DOCS=1 ctest --preset unit -R docs_reference_test\n"
                << "and read the diff. It should be:\n"
                << body;
}

TEST(DocsReference, MetricsPageListsEveryFamily) {
  const std::vector<FamilySpec> scheduler = SchedulerFamilies();
  const std::vector<FamilySpec> agent = AgentFamilies();
  ASSERT_GE(scheduler.size(), 40u);
  ASSERT_GE(agent.size(), 10u);
  CheckGenerated("docs/metrics.md", "scheduler metrics", MetricsTable(scheduler));
  CheckGenerated("docs/metrics.md", "agent metrics", MetricsTable(agent));
  // The families the alerts and the dashboard name are among them (a rename shows here first).
  std::set<std::string> names;
  for (const FamilySpec& f : scheduler) names.insert(f.name);
  for (const FamilySpec& f : agent) names.insert(f.name);
  for (const char* used :
       {"tessera_build_info", "tessera_scheduler_oldest_pending_pod_age_seconds",
        "tessera_scheduler_node_inventory_valid", "tessera_agent_gpu_healthy",
        "tessera_agent_pod_gpu_cap_refusals_total", "tessera_scheduler_api_requests_total"}) {
    EXPECT_TRUE(names.contains(used)) << used;
  }
}

TEST(DocsReference, ConfigurationPageListsEveryKeyAndFlag) {
  CheckGenerated("docs/configuration.md", "scheduler configuration", ConfigTable());
  CLI::App app("tessera", "tessera");
  int exit_code = 0;
  cli::AddSchedulerCommand(app, &exit_code);
  cli::AddAgentCommand(app, &exit_code);
  CheckGenerated("docs/configuration.md", "scheduler flags",
                 FlagsTable(Command(app, {"scheduler"})));
  CheckGenerated("docs/configuration.md", "agent flags", FlagsTable(Command(app, {"agent"})));
  CheckGenerated("docs/configuration.md", "agent uninstall flags",
                 FlagsTable(Command(app, {"agent", "uninstall"})));
}

}  // namespace
}  // namespace tessera
