#include "k8s/client/request_counts.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "common/strings.h"

namespace tessera::k8s {

void RequestCounts::Count(std::string_view method, long status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{std::string(method), status}];
}

int64_t RequestCounts::Get(std::string_view method, long status) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(std::pair<std::string, long>(std::string(method), status));
  return it == counts_.end() ? 0 : it->second;
}

void RequestCounts::Write(prometheus::Exposition& out, const std::string& name) const {
  std::vector<std::tuple<std::string, long, int64_t>> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, n] : counts_) rows.emplace_back(key.first, key.second, n);
  }
  std::sort(rows.begin(), rows.end());
  auto family = out.Family({name,
                            prometheus::MetricType::kCounter,
                            "Requests to the Kubernetes API server, every attempt (retries "
                            "included), by HTTP method (verb) and HTTP status (code; \"none\" "
                            "when no answer came).",
                            {"verb", "code"}});
  for (const auto& [verb, status, n] : rows) {
    family.Add({verb, status == 0 ? std::string("none") : StrCat(status)}, n);
  }
}

}  // namespace tessera::k8s
