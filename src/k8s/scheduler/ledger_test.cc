#include "k8s/scheduler/ledger.h"

#include <gtest/gtest.h>

#include "core/topology/domains.h"
#include "k8s/scheduler/objects.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using testing::NodeObject;

// The ledger of `nodes` (JSON Node objects) keeping `spares` per NVLink domain.
std::string WarningFor(int spares, const std::vector<nlohmann::json>& nodes) {
  LedgerOptions options;
  options.spare_gpus_per_domain = spares;
  ClusterLedger ledger(options, nullptr, nullptr);
  for (const nlohmann::json& n : nodes) ledger.OnNode(Change::kAdded, DecodeNode(n));
  ledger.Sync();
  return ledger.SpareRuleWarning();
}

nlohmann::json Server(const std::string& name, const std::string& rack = "") {
  NodeObject o(name);
  o.Gpus(8, "H100-80GB").NvSwitch(18).Ready();
  if (!rack.empty()) o.Label(std::string(core::kNvlinkDomainLabel), rack);
  return o.Json();
}

TEST(ClusterLedger, SparesOnServersThatAreTheirOwnDomainAreSaidToCostTheirLargestPods) {
  EXPECT_EQ(WarningFor(0, {Server("dgx-1")}), "");  // spares off
  EXPECT_EQ(WarningFor(1, {Server("dgx-1"), Server("dgx-0")}),
            "spareGpusPerDomain 1: 2 servers of 8 GPUs (dgx-0, ...) keep 1 spare each: a pod "
            "asking more than 7 GPUs never fits on them (each server is an NVLink domain of its "
            "own; spares suit rack-scale domains: docs/workloads.md)");
  EXPECT_TRUE(WarningFor(2, {Server("dgx-0")})
                  .starts_with("spareGpusPerDomain 2: 1 server of 8 GPUs (dgx-0) keep 2 spares: a "
                               "pod asking more than 6 GPUs never fits on it ("));
  // One rack-scale domain over both servers: the largest pod still fits on one of them.
  EXPECT_EQ(WarningFor(1, {Server("a", "rack-1"), Server("b", "rack-1")}), "");
  // A server on PCIe only has no NVLink domain: nothing is kept there.
  EXPECT_EQ(WarningFor(1, {NodeObject("pcie").Gpus(4).Ready().Json()}), "");
}

}  // namespace
}  // namespace tessera::k8s
