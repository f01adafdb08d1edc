// The gpu-inventory and assignment records and the reservation condition's message never crash
// the reader, and what is accepted survives a round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "records/assignment.h"
#include "records/inventory.h"
#include "records/reservation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  using namespace tessera::records;
  if (auto inv = InventoryFromJson(text); inv.ok()) {
    auto again = InventoryFromJson(InventoryToJson(*inv));
    if (!again.ok() || InventoryToJson(*again) != InventoryToJson(*inv)) std::abort();
  }
  if (auto a = AssignmentFromJson(text); a.ok()) {
    auto again = AssignmentFromJson(AssignmentToJson(*a));
    if (!again.ok() || AssignmentToJson(*again) != AssignmentToJson(*a)) std::abort();
  }
  if (auto r = ParseReservationMessage(text); r.ok()) {
    auto again = ParseReservationMessage(ReservationMessage(*r));
    if (!again.ok() || ReservationMessage(*again) != ReservationMessage(*r)) std::abort();
  }
  return 0;
}
