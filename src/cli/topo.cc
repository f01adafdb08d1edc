// `tessera topo`: node topology tools.
//   tessera topo parse FILE --model M   nvidia-smi topo -m text -> the node inventory JSON
//   tessera topo profiles [NAME]        the built-in server profiles, or one as inventory JSON
#include <iostream>
#include <iterator>

#include "cli/command.h"
#include "cli/output.h"
#include "common/strings.h"
#include "core/model/mig.h"
#include "core/model/profiles.h"
#include "core/model/quantity.h"
#include "core/topology/topo_text.h"
#include "nlohmann/json.hpp"
#include "records/inventory.h"
#include "sim/yaml_util.h"

namespace tessera::cli {
namespace {

struct ParseOptions {
  std::string file;
  std::string model;
  std::string memory;
  bool mig = false;
  bool compact = false;
};

absl::StatusOr<records::Inventory> ParseToInventory(const ParseOptions& o) {
  std::string text;
  if (o.file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    TESSERA_ASSIGN_OR_RETURN(text, sim::ReadFile(o.file));
  }
  absl::StatusOr<core::ParsedTopology> topo = core::ParseNvidiaSmiTopo(text);
  if (!topo.ok()) {
    return absl::InvalidArgumentError(
        StrCat(o.file == "-" ? "<stdin>" : o.file, ": ", topo.status().message()));
  }
  if (o.model.empty()) {
    return absl::InvalidArgumentError(StrCat(
        "--model is required: `nvidia-smi topo -m` does not name the GPU model (e.g. --model "
        "H100-80GB; models tessera knows the memory of: ",
        StrJoin(core::KnownGpuModels(), ", "), "; any other name with --memory)"));
  }
  int64_t memory = core::KnownGpuMemoryMiB(o.model);
  if (!o.memory.empty()) {
    absl::StatusOr<int64_t> m = core::ParseMemoryMiB(o.memory, core::Rounding::kDown);
    if (!m.ok()) return absl::InvalidArgumentError(StrCat("--memory: ", m.status().message()));
    memory = *m;
  }
  if (memory <= 0) {
    return absl::InvalidArgumentError(StrCat("--memory is required for ", o.model,
                                             ": tessera does not know how much memory it has "
                                             "(e.g. --memory 80Gi)"));
  }
  if (o.mig && !core::FindMigModel(o.model)) {
    return absl::InvalidArgumentError(StrCat("--mig: tessera has no MIG profiles for ", o.model,
                                             " (it has: ", StrJoin(core::MigModelNames(), ", "),
                                             ")"));
  }
  records::Inventory inv;
  inv.gpus = topo->gpus;
  for (core::GpuSpec& g : inv.gpus) {
    g.model = o.model;
    g.memory_mib = memory;
    g.sm_count = core::KnownSmCount(o.model);
    g.mig_enabled = o.mig;
  }
  inv.links = topo->links;
  inv.nics = topo->nics;
  // What we print must read back: the same validation the scheduler applies to the annotation.
  std::string json = records::InventoryToJson(inv);
  absl::StatusOr<records::Inventory> back = records::InventoryFromJson(json);
  if (!back.ok()) return absl::InternalError(StrCat("internal: ", back.status().message()));
  return inv;
}

int Fail(std::string_view command, const absl::Status& status) {
  std::cerr << "tessera topo " << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInternal ? kExitFailure : kExitBadInput;
}

}  // namespace

void AddTopoCommand(CLI::App& app, int* exit_code) {
  CLI::App* topo = app.add_subcommand(
      "topo",
      "Node topology: read `nvidia-smi topo -m` output, list the built-in server profiles.");
  topo->require_subcommand(1);

  auto parse = std::make_shared<ParseOptions>();
  CLI::App* p = topo->add_subcommand(
      "parse",
      "Read the text `nvidia-smi topo -m` prints (tab separated or space aligned, with NIC\n"
      "columns and the legend) and print the node's inventory: the JSON document of the node\n"
      "annotation tessera.dev/gpu-inventory (GPUs with NUMA node and CPU affinity, the link\n"
      "matrix, NICs). The text does not name the GPU model: give --model. Malformed text is\n"
      "an error naming its line and column (exit status 2).");
  p->add_option("FILE", parse->file, "The saved output of `nvidia-smi topo -m`, or - for stdin")
      ->required()
      ->check(CLI::ExistingFile | CLI::IsMember({"-"}));
  p->add_option("--model", parse->model,
                "GPU model of every GPU (A100-80GB, H100-80GB, L40S-48GB, ...); sets memory and SM "
                "count for models tessera knows");
  p->add_option("--memory", parse->memory,
                "GPU memory per GPU (a quantity such as 80Gi), for other models or to override");
  p->add_flag("--mig", parse->mig, "Mark every GPU MIG-enabled (needs a model with MIG profiles)");
  p->add_flag("--compact", parse->compact,
              "One line, as stored in the annotation (default: indented for people)");
  p->callback([parse, exit_code]() {
    absl::StatusOr<records::Inventory> inv = ParseToInventory(*parse);
    if (!inv.ok()) {
      *exit_code = Fail("parse", inv.status());
      return;
    }
    std::cout << records::InventoryToJson(*inv, !parse->compact) << "\n";
    *exit_code = kExitOk;
  });

  auto profile = std::make_shared<std::string>();
  auto profile_output = std::make_shared<OutputFlags>();
  CLI::App* pr = topo->add_subcommand(
      "profiles",
      "List the built-in server profiles (usable as `profile:` in a cluster file); with a NAME,\n"
      "print that profile's node inventory JSON (links, NUMA, CPU affinity, NICs).");
  pr->add_option("NAME", *profile, "A profile name");
  AddOutputFlags(pr, profile_output.get(), {"text", "json"}, "docs/topology.md");
  pr->callback([profile, profile_output, exit_code]() {
    if (profile->empty() && profile_output->json()) {
      nlohmann::json list = nlohmann::json::array();
      for (const std::string& name : core::ProfileNames()) {
        list.push_back({{"name", name}, {"description", core::FindProfile(name)->description}});
      }
      std::cout << nlohmann::json{{"profiles", std::move(list)}}.dump(2) << "\n";
      *exit_code = kExitOk;
      return;
    }
    if (profile->empty()) {
      for (const std::string& name : core::ProfileNames()) {
        std::cout << name << "\t" << core::FindProfile(name)->description << "\n";
      }
      *exit_code = kExitOk;
      return;
    }
    absl::StatusOr<core::Profile> found = core::FindProfile(*profile);
    if (!found.ok()) {
      *exit_code = Fail("profiles", found.status());
      return;
    }
    records::Inventory inv{found->gpus, found->links, found->nics};
    std::cout << records::InventoryToJson(inv, true) << "\n";
    *exit_code = kExitOk;
  });
}

}  // namespace tessera::cli
