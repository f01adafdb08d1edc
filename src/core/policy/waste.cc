#include "core/policy/waste.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace tessera::core {

namespace {

// The models each task of the mix may use.
std::vector<ModelSet> Allowed(const Cluster& cluster, const std::vector<TypicalTask>& mix) {
  std::vector<ModelSet> allowed;
  for (const TypicalTask& t : mix) allowed.push_back(cluster.ResolveModels(t.gpu_models));
  return allowed;
}

// '1' for each task of the mix that the node's GPUs run.
std::string Pattern(const Cluster& cluster, NodeId node, const std::vector<TypicalTask>& mix,
                    const std::vector<ModelSet>& allowed) {
  std::string pattern(mix.size(), '0');
  for (size_t m = 0; m < mix.size(); ++m) {
    if (mix[m].gpu_count > 0 && cluster.ModelMask(node, allowed[m]) != 0) pattern[m] = '1';
  }
  return pattern;
}

}  // namespace

WasteModel::WasteModel(const Cluster& cluster, const std::vector<TypicalTask>& mix, Params params)
    : params_(params), max_gpus_(cluster.max_gpus_per_node()) {
  double cpu_sum = 0, gpu_sum = 0;
  for (const TypicalTask& t : mix) {
    if (t.gpu_count == 0) continue;
    cpu_sizes_.push_back(t.cpu_milli);
    cpu_sum += t.weight * static_cast<double>(t.cpu_milli);
    gpu_sum += t.weight * t.gpu_count * t.gpu_milli / 1000.0;
  }
  std::sort(cpu_sizes_.begin(), cpu_sizes_.end());
  cpu_sizes_.erase(std::unique(cpu_sizes_.begin(), cpu_sizes_.end()), cpu_sizes_.end());
  cpu_levels_ = static_cast<int>(cpu_sizes_.size()) + 1;
  cpu_per_gpu_ = gpu_sum > 0 ? cpu_sum / gpu_sum : 0;

  // Classes of nodes: the same set of tasks may run on their GPUs.
  const std::vector<ModelSet> allowed = Allowed(cluster, mix);
  absl::flat_hash_map<std::string, int32_t> classes;
  std::vector<std::string>& patterns = patterns_;
  // A node whose GPUs are all of one model has that model's class: found once per model.
  std::vector<int32_t> class_of_model(kMaxGpuModels, -1);
  node_class_.resize(cluster.node_count());
  for (int n = 0; n < cluster.node_count(); ++n) {
    const int uniform = cluster.uniform_model(NodeId(n));
    if (uniform >= 0 && class_of_model[uniform] >= 0) {
      node_class_[n] = class_of_model[uniform];
      continue;
    }
    std::string pattern = Pattern(cluster, NodeId(n), mix, allowed);
    auto [it, fresh] = classes.emplace(pattern, static_cast<int32_t>(patterns.size()));
    if (fresh) patterns.push_back(pattern);
    node_class_[n] = it->second;
    if (uniform >= 0) class_of_model[uniform] = it->second;
  }

  const size_t class_count = patterns.size();
  share_.assign(class_count * cpu_levels_ * 1001, 0.0);
  whole_.assign(class_count * cpu_levels_ * (max_gpus_ + 1), 0.0);
  auto stranded = [&](double q) { return std::pow(std::max(0.0, 1.0 - q), params_.horizon); };
  // One-GPU tasks by milli-GPU, for the cumulative share that fits a piece of L.
  std::vector<size_t> by_milli;
  for (size_t m = 0; m < mix.size(); ++m) {
    if (mix[m].gpu_count == 1) by_milli.push_back(m);
  }
  std::sort(by_milli.begin(), by_milli.end(),
            [&](size_t a, size_t b) { return mix[a].gpu_milli < mix[b].gpu_milli; });
  for (size_t c = 0; c < class_count; ++c) {
    for (int ci = 0; ci < cpu_levels_; ++ci) {
      // Tasks that fit a node of this class with CPU threshold ci: CPU within cpu_sizes_[ci - 1].
      auto fits = [&](size_t m) {
        return patterns[c][m] == '1' &&
               (ci > 0 && mix[m].cpu_milli <= cpu_sizes_[static_cast<size_t>(ci) - 1]);
      };
      double* share = share_.data() + (c * cpu_levels_ + ci) * 1001;
      double q = 0;
      size_t next = 0;
      double factor = stranded(0);
      for (int left = 0; left <= 1000; ++left) {
        bool changed = false;
        while (next < by_milli.size() && mix[by_milli[next]].gpu_milli <= left) {
          if (fits(by_milli[next])) {
            q += mix[by_milli[next]].weight;
            changed = true;
          }
          ++next;
        }
        if (changed) factor = stranded(q);
        share[left] = left * factor;
      }
      double* whole = whole_.data() + (c * cpu_levels_ + ci) * (max_gpus_ + 1);
      for (int k = 0; k <= max_gpus_; ++k) {
        double qw = 0;
        for (size_t m = 0; m < mix.size(); ++m) {
          if (mix[m].gpu_count > 0 && mix[m].gpu_count <= k && fits(m)) qw += mix[m].weight;
        }
        whole[k] = 1000.0 * k * stranded(qw);
      }
    }
  }
}

bool WasteModel::AddNodes(const Cluster& cluster, int first, const std::vector<TypicalTask>& mix) {
  if (cluster.max_gpus_per_node() != max_gpus_ || first != static_cast<int>(node_class_.size())) {
    return false;
  }
  const std::vector<ModelSet> allowed = Allowed(cluster, mix);
  std::vector<int32_t> added;
  for (int n = first; n < cluster.node_count(); ++n) {
    auto it =
        std::find(patterns_.begin(), patterns_.end(), Pattern(cluster, NodeId(n), mix, allowed));
    if (it == patterns_.end()) return false;  // a new class: its tables are not there
    added.push_back(static_cast<int32_t>(it - patterns_.begin()));
  }
  node_class_.insert(node_class_.end(), added.begin(), added.end());
  return true;
}

int WasteModel::CpuIndex(int64_t cpu) const {
  return static_cast<int>(std::upper_bound(cpu_sizes_.begin(), cpu_sizes_.end(), cpu) -
                          cpu_sizes_.begin());
}

double WasteModel::Waste(NodeId node, int64_t cpu_free, const int32_t* left, int gpus) const {
  if (gpus == 0 || node_class_.empty()) return 0;
  const int cls = node_class_[node.value()];
  const int ci = CpuIndex(cpu_free);
  const double* share = Share(cls, ci);
  double waste = 0;
  int whole = 0;
  int64_t total = 0;
  for (int g = 0; g < gpus; ++g) {
    const int32_t l = left[g];
    total += l;
    if (l >= 1000) {
      ++whole;
    } else if (l > 0) {
      waste += share[l];
    }
  }
  waste += Whole(cls, ci)[std::min(whole, max_gpus_)];
  if (cpu_per_gpu_ > 0 && params_.cpu_weight > 0) {
    const double feedable = static_cast<double>(cpu_free) / cpu_per_gpu_ * 1000.0;
    waste += params_.cpu_weight * std::max(0.0, static_cast<double>(total) - feedable);
  }
  return waste;
}

}  // namespace tessera::core
