// GPU faults on harness nodes, for tests: what the agent's fake discovery backend reads
// (src/agent/discovery/fake_gpus_file.h). A node's description (`node.fake_gpus`, N/gpus.json) is
// rewritten under its lock (N/gpus.json.lock, which the agent's own MIG changes hold too) and
// replaced with a rename; XID events are lines appended to N/gpus.json.events.
//
//   EditFakeGpus(path, [](json& d) { d["gpus"][1]["recovery_action"] = "reset"; });
//   AppendFakeXid(path, 1, 48);                     // what the driver reports
//   EditFakeGpus(path, [](json& d) { d["gpus"][1].erase("recovery_action"); });   // a reset
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace tessera::e2e {

// Applies `change` to the description at `path`; "" or what went wrong.
inline std::string EditFakeGpus(const std::string& path,
                                const std::function<void(nlohmann::json&)>& change) {
  const int lock = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) return "cannot open " + path + ".lock";
  ::flock(lock, LOCK_EX);
  std::string error;
  {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) {
      error = path + " is not JSON";
    } else {
      change(doc);
      const std::string tmp = path + ".test-tmp";
      std::ofstream(tmp) << doc.dump(1) << "\n";
      if (std::rename(tmp.c_str(), path.c_str()) != 0) error = "cannot replace " + path;
    }
  }
  ::close(lock);
  return error;
}

// Appends an XID event of GPU `gpu` (its index); `mig` names a MIG instance ("1g.10gb@0").
inline std::string AppendFakeXid(const std::string& path, int gpu, int xid,
                                 const std::string& mig = "") {
  nlohmann::json e = {{"gpu", gpu}, {"xid", xid}};
  if (!mig.empty()) e["mig"] = mig;
  std::ofstream out(path + ".events", std::ios::app);
  out << e.dump() << "\n";
  return out.flush() ? "" : "cannot append to " + path + ".events";
}

}  // namespace tessera::e2e
