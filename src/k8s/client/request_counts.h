// Requests to the API server by verb (the HTTP method) and answer (the HTTP status, or "none"
// when no answer came: connection refused, TLS, timeout), every attempt counted, retries
// included. One per Transport, so that everything one program sends through its client (the
// scheduler's informers, binds and status writes; the agent's node patches and watches) is
// counted in one place; served as <prefix>_api_requests_total{verb,code}. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "common/prometheus.h"

namespace tessera::k8s {

class RequestCounts {
 public:
  // `status` 0: no answer.
  void Count(std::string_view method, long status);
  int64_t Get(std::string_view method, long status) const;
  // The family `name` (a counter, "..._total"), one sample per verb and code seen, sorted.
  void Write(prometheus::Exposition& out, const std::string& name) const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::pair<std::string, long>, int64_t> counts_;
};

}  // namespace tessera::k8s
