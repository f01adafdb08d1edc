// Where the scheduler's start-up decoding goes: reads a saved node list page (JSON, as
// `kubectl get --raw '/api/v1/nodes?limit=500'` writes it) and times, per node, the steps the
// informer and DecodeNode take: parsing the page (ParseApiJson, managedFields dropped), decoding
// each node (DecodeNode: labels, taints, capacity, the inventory annotation), and inside that the
// inventory's own JSON (records::InventoryFromJson) and the one-node cluster validation
// (core::Cluster::Create). Prints one JSON line of microseconds per node.
//
//   decode_bench PAGE.json [--rounds 5]
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/model/cluster.h"
#include "k8s/client/watch.h"
#include "k8s/scheduler/objects.h"
#include "records/inventory.h"
#include "records/names.h"

namespace {

double Micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  if (argc < 2) {
    std::cerr << "usage: decode_bench PAGE.json [--rounds N]\n";
    return 2;
  }
  int rounds = 5;
  if (argc >= 4 && std::string(argv[2]) == "--rounds") rounds = std::stoi(argv[3]);
  std::ifstream in(argv[1]);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  double parse_us = 0, decode_us = 0, inventory_us = 0, validate_us = 0;
  size_t nodes = 0, bad = 0;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    absl::StatusOr<nlohmann::json> page = tessera::k8s::ParseApiJson(text, true);
    auto t1 = Clock::now();
    if (!page.ok()) {
      std::cerr << page.status().message() << "\n";
      return 1;
    }
    parse_us += Micros(t1 - t0);
    const nlohmann::json& items = (*page)["items"];
    for (const nlohmann::json& item : items) {
      auto d0 = Clock::now();
      std::shared_ptr<const tessera::k8s::NodeInfo> n = tessera::k8s::DecodeNode(item);
      auto d1 = Clock::now();
      decode_us += Micros(d1 - d0);
      ++nodes;
      if (!n->inventory_error.empty()) ++bad;
      const nlohmann::json& ann = item["metadata"]["annotations"];
      auto it = ann.find(std::string(tessera::records::kInventoryAnnotation));
      if (it == ann.end() || !it->is_string()) continue;
      auto i0 = Clock::now();
      absl::StatusOr<tessera::records::Inventory> inv =
          tessera::records::InventoryFromJson(it->get<std::string>());
      auto i1 = Clock::now();
      inventory_us += Micros(i1 - i0);
      if (!inv.ok()) continue;
      tessera::core::NodeSpec probe;
      probe.name = n->name;
      probe.gpus = inv->gpus;
      probe.links = inv->links;
      probe.nics = inv->nics;
      auto v0 = Clock::now();
      absl::StatusOr<tessera::core::Cluster> check = tessera::core::Cluster::Create({probe});
      auto v1 = Clock::now();
      validate_us += Micros(v1 - v0);
    }
  }
  const double n = static_cast<double>(nodes);
  std::cout << nlohmann::json{{"bytes", text.size()},
                              {"nodes", nodes / rounds},
                              {"bad_inventories", bad / rounds},
                              {"parse_us_per_node", parse_us / n},
                              {"decode_us_per_node", decode_us / n},
                              {"of_which_inventory_json_us", inventory_us / n},
                              {"of_which_cluster_validation_us", validate_us / n}}
                   .dump()
            << "\n";
  return 0;
}
