// The agent's readers of files people write or tools print never crash: the GPU description file
// (and what it accepts becomes an inventory record the scheduler reads back), and nvidia-smi -q
// text.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "agent/discovery/fake_gpus_file.h"
#include "agent/discovery/nvidia_smi_check.h"
#include "records/inventory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  using namespace tessera;
  if (auto node = agent::ParseFakeGpusFile(text, "fuzz.json"); node.ok()) {
    if (node->gpus.empty() || node->links.size() != static_cast<int>(node->gpus.size())) {
      std::abort();
    }
    const std::string json = records::InventoryToJson(node->ToInventory());
    if (!records::InventoryFromJson(json).ok()) std::abort();
  }
  (void)agent::ParseNvidiaSmiQ(text);
  return 0;
}
