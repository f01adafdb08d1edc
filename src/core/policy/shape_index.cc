#include "core/policy/shape_index.h"

namespace tessera::core {

RequestShape RequestShape::Of(const Query& query) {
  const PodRequest& r = *query.request;
  RequestShape s;
  s.cpu_milli = r.cpu_milli;
  s.memory_mib = r.memory_mib;
  s.gpu = r.gpu;
  s.models = query.models;
  s.node_set = query.nodes != nullptr ? query.nodes->id() : 0;
  return s;
}

void ShapeIndex::Attach(const ClusterState& state, std::vector<int32_t> rank, bool uniform,
                        size_t max_entries) {
  uniform_ = uniform;
  n_ = state.node_count();
  TESSERA_CHECK(n_ < (1 << kRankBits));
  TESSERA_CHECK(static_cast<int>(rank.size()) == n_);
  rank_ = std::move(rank);
  blocks_ = (n_ + kBlock - 1) / kBlock;
  max_rows_ = std::max<size_t>(1, max_entries / static_cast<size_t>(std::max(n_, 1)));
  Invalidate();
}

void ShapeIndex::Invalidate() {
  ids_.clear();
  rows_.clear();
  log_.clear();
  log_base_ = 0;
  clock_ = 0;
}

void ShapeIndex::NodeChanged(NodeId node) {
  if (rows_.empty()) return;  // nothing cached to invalidate
  log_.push_back(node.value());
  if (log_.size() > 4 * static_cast<size_t>(n_) + 1024) {
    // Rows behind the log's start do a full stamp check on their next use.
    log_base_ += log_.size();
    log_.clear();
  }
}

void ShapeIndex::SetLeaf(Row& row, int node) {
  const int64_t old = row.key[node];
  const int64_t now = KeyOf(row.eval[node], node);
  row.key[node] = now;
  const int b = node / kBlock;
  if (now >= row.block_max[b]) {
    row.block_max[b] = now;
  } else if (old == row.block_max[b]) {
    const int end = std::min(n_, (b + 1) * kBlock);
    int64_t m = kNone;
    for (int i = b * kBlock; i < end; ++i) m = std::max(m, row.key[i]);
    row.block_max[b] = m;
  }
  if (uniform_) row.block_count[b] += (now != kNone) - (old != kNone);
}

void ShapeIndex::Build(Row& row) {
  row.block_max.assign(blocks_, kNone);
  if (uniform_) row.block_count.assign(blocks_, 0);
  for (int i = 0; i < n_; ++i) {
    row.key[i] = KeyOf(row.eval[i], i);
    row.block_max[i / kBlock] = std::max(row.block_max[i / kBlock], row.key[i]);
    if (uniform_ && row.key[i] != kNone) ++row.block_count[i / kBlock];
  }
}

ShapeIndex::Row* ShapeIndex::Lookup(const RequestShape& shape, bool* fresh) {
  auto it = ids_.find(shape);
  if (it != ids_.end()) {
    *fresh = false;
    return &rows_[it->second];
  }
  *fresh = true;
  size_t slot;
  if (rows_.size() < max_rows_) {
    slot = rows_.size();
    rows_.emplace_back();
  } else {
    slot = 0;
    for (size_t i = 1; i < rows_.size(); ++i) {
      if (rows_[i].last_use < rows_[slot].last_use) slot = i;
    }
    ids_.erase(rows_[slot].shape);
  }
  Row& row = rows_[slot];
  row.shape = shape;
  row.stamp.assign(n_, 0);
  row.eval.assign(n_, NodeEval{});
  row.key.assign(n_, kNone);
  row.block_max.assign(blocks_, kNone);
  row.block_count.assign(uniform_ ? blocks_ : 0, 0);
  row.log_pos = log_base_ + log_.size();
  ids_.emplace(shape, slot);
  return &row;
}

}  // namespace tessera::core
