// Other objects the scheduler reads from the API server: PodDisruptionBudgets (policy/v1),
// Queues (tessera.dev/v1alpha1) and the leader-election Lease. Anyone who may write them may write
// anything: decoding never throws or crashes; what is accepted is usable.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "k8s/client/leader_election.h"
#include "k8s/client/watch.h"
#include "k8s/scheduler/disruption_budgets.h"
#include "records/queue.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nlohmann::json> j = tessera::k8s::ParseApiJson(text, /*drop_managed_fields=*/true);
  if (!j.ok()) return 0;
  auto budget = tessera::k8s::DecodeBudget(*j);
  if (budget == nullptr) std::abort();
  (void)budget->Selects({{"app", "x"}});
  auto queue = tessera::records::QueueFromObject(*j);
  if (queue.ok() && queue->name.empty()) std::abort();
  auto lease = tessera::k8s::LeaseRecordFromJson(*j);
  (void)lease;
  return 0;
}
