#include "k8s/scheduler/node_index.h"

#include <algorithm>

namespace tessera::k8s {
namespace {

using Bits = std::vector<uint64_t>;

void And(Bits& a, const Bits& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] &= i < b.size() ? b[i] : 0;
}
void Or(Bits& a, const Bits& b) {
  if (a.size() < b.size()) a.resize(b.size(), 0);
  for (size_t i = 0; i < b.size(); ++i) a[i] |= b[i];
}
// a &= ~b
void AndNot(Bits& a, const Bits& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] &= ~b[i];
}
bool Test(const Bits& b, int id) {
  const size_t w = static_cast<size_t>(id) / 64;
  return w < b.size() && (b[w] >> (id % 64)) & 1;
}

}  // namespace

void NodeIndex::Put(Bits& b, int id, bool on) {
  const size_t w = static_cast<size_t>(id) / 64;
  if (w >= b.size()) {
    if (!on) return;
    b.resize(w + 1, 0);
  }
  if (on) {
    b[w] |= uint64_t{1} << (id % 64);
  } else {
    b[w] &= ~(uint64_t{1} << (id % 64));
    while (!b.empty() && b.back() == 0) b.pop_back();
  }
}

int NodeIndex::label_values() const {
  int n = 0;
  for (const auto& [k, values] : values_) n += static_cast<int>(values.size());
  return n;
}

void NodeIndex::Remove(int id) {
  if (id < 0 || static_cast<size_t>(id) >= nodes_.size() || !nodes_[id]) return;
  const NodeInfo& old = *nodes_[id];
  for (const auto& [k, v] : old.spec.labels) {
    if (auto key = values_.find(k); key != values_.end()) {
      if (auto value = key->second.find(v); value != key->second.end()) {
        Put(value->second, id, false);
        if (value->second.empty()) key->second.erase(value);
      }
      if (key->second.empty()) values_.erase(key);
    }
    if (auto key = keys_.find(k); key != keys_.end()) {
      Put(key->second, id, false);
      if (key->second.empty()) keys_.erase(key);
    }
  }
  by_name_.erase(old.name);
  tainted_.erase(id);
  Put(live_, id, false);
  nodes_[id] = nullptr;
}

void NodeIndex::Set(int id, std::shared_ptr<const NodeInfo> node) {
  Remove(id);
  if (static_cast<size_t>(id) >= nodes_.size()) nodes_.resize(id + 1);
  for (const auto& [k, v] : node->spec.labels) {
    Put(values_[k][v], id, true);
    Put(keys_[k], id, true);
  }
  by_name_[node->name] = id;
  if (!node->taints.empty()) tainted_.insert(id);
  Put(live_, id, true);
  nodes_[id] = std::move(node);
}

Bits NodeIndex::Match(const NodeSelectorRequirement& r, const Bits& live) const {
  Bits out(live.size(), 0);
  auto values = [&]() {  // nodes whose label (or name) is one of r.values
    Bits in(live.size(), 0);
    if (r.field) {
      for (const std::string& v : r.values) {
        if (auto it = by_name_.find(v); it != by_name_.end()) Put(in, it->second, true);
      }
      return in;
    }
    auto k = values_.find(r.key);
    if (k == values_.end()) return in;
    for (const std::string& v : r.values) {
      if (auto it = k->second.find(v); it != k->second.end()) Or(in, it->second);
    }
    return in;
  };
  auto has_key = [&]() {
    if (r.field) return live;  // every node has a name
    auto k = keys_.find(r.key);
    return k == keys_.end() ? Bits(live.size(), 0) : k->second;
  };
  if (r.op == "In") {
    out = values();
  } else if (r.op == "NotIn") {
    out = live;
    AndNot(out, values());
  } else if (r.op == "Exists") {
    out = has_key();
  } else if (r.op == "DoesNotExist") {
    out = live;
    AndNot(out, has_key());
  } else if ((r.op == "Gt" || r.op == "Lt") && r.values.size() == 1 && !r.field) {
    int64_t want = 0;
    try {
      want = std::stoll(r.values[0]);
    } catch (const std::exception&) {
      return out;
    }
    auto k = values_.find(r.key);
    if (k == values_.end()) return out;
    for (const auto& [v, nodes] : k->second) {
      try {
        const int64_t have = std::stoll(v);
        if (r.op == "Gt" ? have > want : have < want) Or(out, nodes);
      } catch (const std::exception&) {
      }
    }
  }
  And(out, live);
  return out;
}

NodeIndex::Result NodeIndex::Allowed(const NodeConstraints& c, int size) const {
  Bits live((static_cast<size_t>(size) + 63) / 64, 0);
  for (size_t i = 0; i < live.size() && i < live_.size(); ++i) live[i] = live_[i];
  if (size % 64 != 0 && !live.empty()) live.back() &= (uint64_t{1} << (size % 64)) - 1;
  // Taints first, as NodeAllows decides.
  Bits refused_taint(live.size(), 0);
  Result r;
  for (int id : tainted_) {
    if (id >= size) break;
    const bool tolerated = ToleratesAll(c.tolerations, nodes_[id]->taints);
    if (!tolerated) {
      Put(refused_taint, id, true);
      ++r.taint;
    }
  }
  Bits selected = live;
  for (const auto& [k, v] : c.node_selector) {
    auto key = values_.find(k);
    const Bits* nodes = nullptr;
    if (key != values_.end()) {
      if (auto it = key->second.find(v); it != key->second.end()) nodes = &it->second;
    }
    if (nodes == nullptr) {
      std::fill(selected.begin(), selected.end(), 0);
      break;
    }
    And(selected, *nodes);
  }
  if (c.has_affinity) {
    Bits any(live.size(), 0);
    for (const NodeSelectorTerm& term : c.affinity_terms) {
      if (term.empty()) continue;  // an empty term matches no node
      Bits all = live;
      for (const NodeSelectorRequirement& req : term) And(all, Match(req, live));
      Or(any, all);
    }
    And(selected, any);
  }
  Bits refused_selector = live;
  AndNot(refused_selector, selected);
  AndNot(refused_selector, refused_taint);
  for (uint64_t w : refused_selector) r.selector += __builtin_popcountll(w);
  AndNot(selected, refused_taint);
  r.allowed.assign(size, false);
  for (int id = 0; id < size; ++id) r.allowed[id] = Test(selected, id);
  return r;
}

}  // namespace tessera::k8s
