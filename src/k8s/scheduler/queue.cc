#include "k8s/scheduler/queue.h"

#include <cstdint>

namespace tessera::k8s {

core::Arrival ArrivalOfCreation(std::string_view created_text, int64_t seq) {
  int64_t created = 0;
  int digits = 0;
  for (char c : created_text) {
    if (c < '0' || c > '9') continue;
    if (++digits > 14) break;
    created = created * 10 + (c - '0');
  }
  if (digits < 14) created = INT64_MAX;
  return {created, seq};
}

}  // namespace tessera::k8s
