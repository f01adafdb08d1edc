// Helpers for the trace-replay tests: clusters and pod lists from CSV text (a CHECK failure on bad
// text: the tests write it), and the Alibaba trace's files from data/. Tests only (they use
// TESSERA_DATA_DIR, which tessera_cc_test defines).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/cluster.h"
#include "sim/trace/alibaba.h"

namespace tessera::sim::testing {

// A cluster from an Alibaba node list ("sn,cpu_milli,memory_mib,gpu,model\n...").
inline core::Cluster Nodes(const std::string& csv) {
  absl::StatusOr<std::vector<core::NodeSpec>> n = ParseAlibabaNodes(csv, "nodes.csv");
  TESSERA_CHECK(n.ok());
  absl::StatusOr<core::Cluster> c = core::Cluster::Create(*n);
  TESSERA_CHECK(c.ok());
  return *std::move(c);
}

// An Alibaba pod list from text.
inline PodTrace Pods(const std::string& csv) {
  absl::StatusOr<PodTrace> t = ParseAlibabaPods(csv, "pods.csv");
  TESSERA_CHECK_MSG(t.ok(), std::string(t.status().message()).c_str());
  return *std::move(t);
}

// The Alibaba trace's GPU nodes and one of its pod lists ("default", "gpushare100", ...).
struct AlibabaWorkload {
  core::Cluster cluster;
  PodTrace trace;
};
inline absl::StatusOr<AlibabaWorkload> LoadAlibaba(const std::string& workload) {
  const std::string dir = std::string(TESSERA_DATA_DIR) + "/traces/alibaba-gpu-v2023/";
  TESSERA_ASSIGN_OR_RETURN(std::vector<core::NodeSpec> nodes,
                           ReadAlibabaNodes(dir + "openb_node_list_gpu_node.csv"));
  TESSERA_ASSIGN_OR_RETURN(core::Cluster cluster, core::Cluster::Create(std::move(nodes)));
  TESSERA_ASSIGN_OR_RETURN(PodTrace trace,
                           ReadAlibabaPods(StrCat(dir, "openb_pod_list_", workload, ".csv")));
  return AlibabaWorkload{std::move(cluster), std::move(trace)};
}

}  // namespace tessera::sim::testing
