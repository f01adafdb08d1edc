#include "soak/checker.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace tessera::soak {
namespace {

using nlohmann::json;

const json& Field(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string Str(const json& j, const char* key) {
  const json& v = Field(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

int64_t Int(const json& j, const char* key, int64_t fallback = 0) {
  const json& v = Field(j, key);
  return v.is_number_integer() ? v.get<int64_t>() : fallback;
}

std::string PodName(const json& pod) {
  return Str(Field(pod, "metadata"), "namespace") + "/" + Str(Field(pod, "metadata"), "name");
}

bool Finished(const json& pod) {
  const std::string phase = Str(Field(pod, "status"), "phase");
  return phase == "Succeeded" || phase == "Failed";
}

// Node name -> the GPUs its inventory lists: uuid -> (index, memory MiB, healthy).
struct InventoryGpu {
  int index = -1;
  int64_t memory_mib = 0;
  bool healthy = true;
};
std::map<std::string, std::map<std::string, InventoryGpu>> Inventories(const json& nodes) {
  std::map<std::string, std::map<std::string, InventoryGpu>> out;
  for (const json& n : Field(nodes, "items")) {
    const std::string name = Str(Field(n, "metadata"), "name");
    const std::string text =
        Str(Field(Field(n, "metadata"), "annotations"), "tessera.dev/gpu-inventory");
    if (text.empty()) continue;
    const json inv = json::parse(text, nullptr, false);
    if (inv.is_discarded()) continue;
    for (const json& g : Field(inv, "gpus")) {
      InventoryGpu gpu;
      gpu.index = static_cast<int>(Int(g, "index", -1));
      gpu.memory_mib = Int(g, "memory_mib");
      const json& health = Field(g, "health");
      gpu.healthy = !health.is_object() || Field(health, "healthy") != json(false);
      out[name][Str(g, "uuid")] = gpu;
    }
  }
  return out;
}

// "gpu-3" of pool `pool` (a node) -> its uuid and MIG placement, from the ResourceSlices.
struct SliceDevice {
  std::string node, uuid, mig;
};
std::map<std::string, SliceDevice> SliceDevices(const json& slices) {
  std::map<std::string, SliceDevice> out;
  auto attr = [](const json& attrs, const char* key) -> json {
    for (const std::string& k : {std::string(key), std::string("gpu.tessera.dev/") + key}) {
      auto it = attrs.find(k);
      if (it == attrs.end() || !it->is_object()) continue;
      for (const char* t : {"string", "int", "version", "bool"}) {
        if (it->contains(t)) return (*it)[t];
      }
    }
    return json();
  };
  for (const json& s : Field(slices, "items")) {
    const json& spec = Field(s, "spec");
    if (Str(spec, "driver") != "gpu.tessera.dev") continue;
    const std::string pool = Str(Field(spec, "pool"), "name");
    for (const json& d : Field(spec, "devices")) {
      const json attrs = Field(d, "attributes");
      SliceDevice dev;
      dev.node = Str(spec, "nodeName");
      const json type = attr(attrs, "type");
      const json uuid = attr(attrs, type == json("mig") ? "parentUUID" : "uuid");
      if (uuid.is_string()) dev.uuid = uuid.get<std::string>();
      if (type == json("mig")) {
        const json profile = attr(attrs, "profile");
        const json start = attr(attrs, "migStart");
        if (profile.is_string() && start.is_number_integer()) {
          dev.mig = profile.get<std::string>() + "@" + std::to_string(start.get<int64_t>());
        }
      }
      out[pool + "/" + Str(d, "name")] = dev;
    }
  }
  return out;
}

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

// "visible=a,b limit_mib=4096" -> key -> value (the last line with visible=).
std::map<std::string, std::string> ParseReport(const std::string& report) {
  std::map<std::string, std::string> out;
  std::istringstream lines(report);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (line.rfind("visible=", 0) == 0) last = line;
  }
  for (const std::string& word : Split(last, ' ')) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

}  // namespace

bool ParseMiB(const std::string& q, int64_t* mib) {
  size_t digits = 0;
  while (digits < q.size() && std::isdigit(static_cast<unsigned char>(q[digits]))) ++digits;
  if (digits == 0 || digits > 15) return false;
  const int64_t n = std::stoll(q.substr(0, digits));
  const std::string unit = q.substr(digits);
  if (unit == "Mi") {
    *mib = n;
  } else if (unit == "Gi") {
    *mib = n * 1024;
  } else if (unit == "Ti") {
    *mib = n * 1024 * 1024;
  } else if (unit == "Ki") {
    *mib = (n + 1023) / 1024;
  } else if (unit.empty()) {
    *mib = n;  // a plain number (compute percent, or bytes where the caller says)
  } else {
    return false;
  }
  return true;
}

std::map<std::string, std::vector<Holding>> Checker::Holdings(const Snapshot& s) {
  std::map<std::string, std::vector<Holding>> out;
  const auto inventories = Inventories(s.nodes);
  const auto devices = SliceDevices(s.slices);
  std::map<std::string, const json*> claims;  // "ns/name"
  for (const json& c : Field(s.claims, "items")) {
    claims[Str(Field(c, "metadata"), "namespace") + "/" + Str(Field(c, "metadata"), "name")] = &c;
  }
  for (const json& pod : Field(s.pods, "items")) {
    if (Finished(pod)) continue;
    const json& meta = Field(pod, "metadata");
    const std::string uid = Str(meta, "uid");
    const std::string ns = Str(meta, "namespace");
    const std::string node = Str(Field(pod, "spec"), "nodeName");
    std::vector<Holding>& held = out[uid];
    // Classic: the assignment record.
    const std::string record = Str(Field(meta, "annotations"), "tessera.dev/assignment");
    const json a = record.empty() ? json() : json::parse(record, nullptr, false);
    if (a.is_object()) {
      const std::string anode = Str(a, "node");
      for (const json& g : Field(a, "gpus")) {
        Holding h;
        h.node = anode;
        h.gpu_uuid = Str(g, "uuid");
        if (h.gpu_uuid.empty()) {
          auto inv = inventories.find(anode);
          const int64_t index = Int(g, "index", -1);
          if (inv != inventories.end()) {
            for (const auto& [uuid, ig] : inv->second) {
              if (ig.index == index) h.gpu_uuid = uuid;
            }
          }
        }
        h.memory_mib = Int(g, "memory_mib");
        h.compute_milli = Int(g, "compute_milli");
        h.whole = Field(g, "exclusive") == json(true);
        const json& mig = Field(g, "mig");
        if (mig.is_object()) h.mig = Str(mig, "profile") + "@" + std::to_string(Int(mig, "start"));
        h.holder = "pod " + PodName(pod);
        held.push_back(h);
      }
    }
    // DRA: the pod's claims' allocations.
    std::set<std::string> names;
    for (const json& rc : Field(Field(pod, "spec"), "resourceClaims")) {
      if (!Str(rc, "resourceClaimName").empty()) names.insert(Str(rc, "resourceClaimName"));
    }
    for (const json& st : Field(Field(pod, "status"), "resourceClaimStatuses")) {
      if (!Str(st, "resourceClaimName").empty()) names.insert(Str(st, "resourceClaimName"));
    }
    const std::string extended =
        Str(Field(Field(pod, "status"), "extendedResourceClaimStatus"), "resourceClaimName");
    if (!extended.empty()) names.insert(extended);
    for (const std::string& name : names) {
      auto c = claims.find(ns + "/" + name);
      if (c == claims.end()) continue;
      const json& results =
          Field(Field(Field(Field(*c->second, "status"), "allocation"), "devices"), "results");
      for (const json& r : results) {
        if (Str(r, "driver") != "gpu.tessera.dev") continue;
        auto d = devices.find(Str(r, "pool") + "/" + Str(r, "device"));
        Holding h;
        h.node = d != devices.end() ? d->second.node : node;
        h.gpu_uuid = d != devices.end() ? d->second.uuid : "";
        h.mig = d != devices.end() ? d->second.mig : "";
        h.unresolved = d == devices.end() || h.gpu_uuid.empty();
        h.holder = "claim " + ns + "/" + name;
        const json& consumed = Field(r, "consumedCapacity");
        int64_t gpu_memory = 0;
        auto inv = inventories.find(h.node);
        if (inv != inventories.end()) {
          auto g = inv->second.find(h.gpu_uuid);
          if (g != inv->second.end()) gpu_memory = g->second.memory_mib;
        }
        int64_t memory = 0, compute = 0;
        const bool has_memory = consumed.is_object() && Field(consumed, "memory").is_string() &&
                                ParseMiB(Str(consumed, "memory"), &memory);
        if (consumed.is_object() && Field(consumed, "compute").is_string()) {
          (void)ParseMiB(Str(consumed, "compute"), &compute);
        }
        if (!h.mig.empty()) {
          h.memory_mib = 0;  // a MIG instance: counted as an instance, not in shares
        } else if (!has_memory || (gpu_memory > 0 && memory >= gpu_memory)) {
          h.whole = true;
          h.memory_mib = gpu_memory;
          h.compute_milli = 1000;
        } else {
          h.memory_mib = memory;
          h.compute_milli = compute * 10;
        }
        held.push_back(h);
      }
    }
    if (held.empty()) out.erase(uid);
  }
  return out;
}

void Checker::Record(std::vector<Violation>* out, const std::string& key, Violation v) {
  if (!reported_.insert(key).second) return;
  violations_.push_back(v);
  out->push_back(std::move(v));
}

std::vector<Violation> Checker::Check(const Snapshot& s) {
  std::vector<Violation> out;
  const auto inventories = Inventories(s.nodes);
  const auto holdings = Holdings(s);

  // Per GPU: each holder once (a claim shared by several pods holds once).
  struct GpuUse {
    std::map<std::string, Holding> by_holder;
  };
  std::map<std::string, GpuUse> gpus;  // "node/uuid"
  for (const auto& [uid, held] : holdings) {
    for (const Holding& h : held) {
      if (h.unresolved) continue;
      const std::string key = h.node + "/" + h.gpu_uuid + "/" + h.holder + "/" + h.mig;
      gpus[h.node + "/" + h.gpu_uuid].by_holder.emplace(key, h);
    }
  }
  for (const auto& [gpu, use] : gpus) {
    int whole = 0;
    int64_t memory = 0, compute = 0;
    std::map<std::string, std::vector<std::string>> migs;
    std::vector<std::string> holders;
    for (const auto& [key, h] : use.by_holder) {
      holders.push_back(h.holder + (h.whole ? " (whole)" : h.mig.empty() ? "" : " " + h.mig));
      if (h.whole) ++whole;
      if (!h.mig.empty()) migs[h.mig].push_back(h.holder);
      memory += h.memory_mib;
      if (h.mig.empty()) compute += h.compute_milli;
    }
    std::string list;
    for (const std::string& h : holders) list += (list.empty() ? "" : ", ") + h;
    if (whole > 0 && use.by_holder.size() > 1) {
      Record(&out, "double/" + gpu + "/" + list,
             {"no-double-grant", "GPU " + gpu + " held whole and by others: " + list});
    }
    for (const auto& [mig, who] : migs) {
      if (who.size() > 1) {
        Record(
            &out, "mig/" + gpu + "/" + mig + "/" + list,
            {"no-double-grant", "MIG instance " + mig + " of GPU " + gpu + " held twice: " + list});
      }
    }
    const size_t slash = gpu.find('/');
    const std::string node = gpu.substr(0, slash), uuid = gpu.substr(slash + 1);
    auto inv = inventories.find(node);
    if (inv == inventories.end() || !inv->second.contains(uuid)) continue;
    const int64_t capacity = inv->second.at(uuid).memory_mib;
    if (memory > capacity) {
      Record(&out, "memory/" + gpu + "/" + list,
             {"capacity", "GPU " + gpu + ": " + std::to_string(memory) + " MiB granted of " +
                              std::to_string(capacity) + ": " + list});
    }
    if (compute > 1000) {
      Record(&out, "compute/" + gpu + "/" + list,
             {"capacity",
              "GPU " + gpu + ": compute " + std::to_string(compute) + "/1000 granted: " + list});
    }
  }

  // Unhealthy GPUs: since when, as this checker saw them.
  std::set<std::string> unhealthy_now;
  for (const auto& [node, gpus_of] : inventories) {
    for (const auto& [uuid, g] : gpus_of) {
      if (g.healthy) continue;
      const std::string key = node + "/" + uuid;
      unhealthy_now.insert(key);
      unhealthy_since_.try_emplace(key, s.at);
    }
  }
  for (auto it = unhealthy_since_.begin(); it != unhealthy_since_.end();) {
    it = unhealthy_now.contains(it->first) ? std::next(it) : unhealthy_since_.erase(it);
  }

  for (const json& pod : Field(s.pods, "items")) {
    if (Finished(pod)) continue;
    const json& meta = Field(pod, "metadata");
    const std::string uid = Str(meta, "uid");
    const bool leaving = Field(meta, "deletionTimestamp").is_string();
    const std::string node = Str(Field(pod, "spec"), "nodeName");
    const std::string phase = Str(Field(pod, "status"), "phase");
    auto first = seen_since_.try_emplace(uid, s.at).first;
    auto bound = bound_seen_.end();
    if (!node.empty()) bound = bound_seen_.try_emplace(uid, s.at).first;
    auto held = holdings.find(uid);

    // What the container received.
    const bool resolved =
        held == holdings.end() || std::none_of(held->second.begin(), held->second.end(),
                                               [](const Holding& h) { return h.unresolved; });
    if (phase == "Running" && held != holdings.end() && resolved && s.reports.contains(uid)) {
      const auto report = ParseReport(s.reports.at(uid));
      if (!report.empty()) {
        std::set<std::string> want, got;
        int migs = 0, shares = 0;
        int64_t share_mib = 0;
        for (const Holding& h : held->second) {
          if (!h.mig.empty()) {
            ++migs;
          } else {
            want.insert(h.gpu_uuid);
            if (!h.whole) {
              ++shares;
              share_mib = h.memory_mib;
            }
          }
        }
        int got_migs = 0;
        for (const std::string& v :
             Split(report.count("visible") ? report.at("visible") : "", ',')) {
          if (v.rfind("MIG-", 0) == 0) {
            ++got_migs;
          } else {
            got.insert(v);
          }
        }
        std::string why;
        if (got != want || got_migs != migs) why = "visible=" + report.at("visible");
        const std::string limit = report.count("limit_mib") ? report.at("limit_mib") : "";
        if (shares == 1 && held->second.size() == 1 && limit != std::to_string(share_mib)) {
          why += " limit_mib=" + limit + " (granted " + std::to_string(share_mib) + ")";
        }
        if (!why.empty()) {
          Record(&out, "sees/" + uid,
                 {"container-sees",
                  "pod " + PodName(pod) + " reports " + why + ", not its assignment"});
        }
      }
    }

    // On an unhealthy GPU.
    if (held != holdings.end()) {
      for (const Holding& h : held->second) {
        if (h.unresolved) continue;
        auto since = unhealthy_since_.find(h.node + "/" + h.gpu_uuid);
        if (since == unhealthy_since_.end()) continue;
        // How long this pod has been there since the GPU turned unhealthy (or since it came).
        const Clock::time_point from =
            bound != bound_seen_.end() ? std::max(since->second, bound->second) : since->second;
        if (!leaving && s.at - from > options_.unhealthy_allowance) {
          Record(&out, "unhealthy/" + uid + "/" + h.gpu_uuid,
                 {"unhealthy-gpu",
                  "pod " + PodName(pod) + " still on unhealthy GPU " + h.node + "/" + h.gpu_uuid +
                      " after " + std::to_string(options_.unhealthy_allowance.count()) + " s"});
        }
        if (bound != bound_seen_.end() && bound->second > since->second + options_.bind_slack) {
          Record(&out, "bound-unhealthy/" + uid + "/" + h.gpu_uuid,
                 {"unhealthy-gpu", "pod " + PodName(pod) + " was bound to GPU " + h.node + "/" +
                                       h.gpu_uuid + ", unhealthy since before"});
        }
      }
    }

    // Runs, or says why it waits.
    if (phase == "Running" || leaving || s.at - first->second <= options_.pending_allowance) {
      continue;
    }
    std::string reason;
    if (node.empty()) {
      for (const json& c : Field(Field(pod, "status"), "conditions")) {
        if (Str(c, "type") == "PodScheduled" && Str(c, "status") == "False" &&
            !Str(c, "message").empty()) {
          reason = Str(c, "reason") + ": " + Str(c, "message");
        }
      }
    } else {
      for (const json& cs : Field(Field(pod, "status"), "containerStatuses")) {
        reason += Str(Field(Field(cs, "state"), "waiting"), "reason");
      }
    }
    if (reason.empty()) {
      Record(&out, "waits/" + uid,
             {"runs-or-waits", "pod " + PodName(pod) + " neither runs nor says why after " +
                                   std::to_string(options_.pending_allowance.count()) + " s" +
                                   (node.empty() ? " (unbound)" : " (bound to " + node + ")")});
    }
  }
  // Forget pods that are gone.
  std::set<std::string> live;
  for (const json& pod : Field(s.pods, "items")) live.insert(Str(Field(pod, "metadata"), "uid"));
  for (auto* m : {&seen_since_, &bound_seen_}) {
    for (auto it = m->begin(); it != m->end();) {
      it = live.contains(it->first) ? std::next(it) : m->erase(it);
    }
  }
  return out;
}

std::vector<Violation> CheckLeaks(const std::vector<NodeLeftovers>& nodes) {
  std::vector<Violation> out;
  auto add = [&](const std::string& node, const char* what, const std::vector<std::string>& left) {
    if (left.empty()) return;
    std::string list;
    for (const std::string& l : left) list += (list.empty() ? "" : ", ") + l;
    out.push_back(
        {"no-leak", "node " + node + ": " + what + " left after every pod ended: " + list});
  };
  for (const NodeLeftovers& n : nodes) {
    add(n.node, "pod folders (segments, records)", n.pod_dirs);
    add(n.node, "DRA claim folders", n.claim_dirs);
    add(n.node, "CDI specs", n.cdi_specs);
    add(n.node, "DRA checkpoint entries", n.checkpoint_claims);
    add(n.node, "MIG instances the DRA driver created", n.dra_mig_instances);
  }
  return out;
}

}  // namespace tessera::soak
