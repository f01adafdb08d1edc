// The discovery backend for machines without GPUs: the GPUs a description file lists
// (fake_gpus_file.h). The file is read again on every Discover(), so a test or the node harness
// changes what the agent sees (a GPU turns unhealthy, MIG instances change) by rewriting it;
// Wait() returns early when the file changes. It also carries out MIG changes by rewriting the file
// (MigReconfigurer): instances destroyed go, a new one comes with a generated device UUID, MIG mode
// turns on and off, so the file is the fake GPUs' state as the driver's would be. XID events are
// the lines appended to "<file>.events" after the backend was made (fake_gpus_file.h); Wait()
// returns them. Rewrites hold the file's lock ("<file>.lock"), as every writer must.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "agent/discovery/discovery.h"
#include "nlohmann/json.hpp"

namespace tessera::agent {

class FakeDiscovery : public GpuDiscovery, public MigReconfigurer {
 public:
  explicit FakeDiscovery(std::string path);

  std::string Describe() const override;
  absl::StatusOr<NodeGpus> Discover() override;
  absl::StatusOr<WaitResult> Wait(std::chrono::milliseconds timeout) override;
  MigReconfigurer* mig() override { return this; }
  absl::StatusOr<DiscoveredGpu> ReconfigureMig(
      const std::string& uuid, const std::vector<records::MigInstanceRecord>& destroy,
      const records::MigInstanceRecord& create) override;
  absl::StatusOr<DiscoveredGpu> DestroyMig(const std::string& uuid,
                                           const records::MigInstanceRecord& instance) override;
  absl::StatusOr<DiscoveredGpu> SetMigMode(const std::string& uuid, bool enabled) override;

 private:
  // Applies `change` to the GPU `uuid`'s object of the file, checks the result as the file's
  // reader does and writes it atomically; returns the GPU as it is then. `what` begins the error
  // of a result the reader refuses ("MIG instance 1g.10gb@0 cannot be created on GPU ...").
  absl::StatusOr<DiscoveredGpu> Rewrite(
      const std::string& uuid, const std::string& what,
      const std::function<absl::Status(nlohmann::json& gpu)>& change);

  // What identifies a version of the file: modification time, size, inode ("" if missing).
  std::string Stamp() const;

  // New complete lines of the events file, as events of `gpus`.
  void ReadEvents(const NodeGpus& gpus, WaitResult* result);

  std::string path_;
  std::mutex mig_mu_;                     // one MIG change at a time
  std::string seen_stamp_;                // the stamp at the last Discover()
  std::mutex events_mu_;                  // guards the two below (Wait may run beside Discover)
  int64_t events_offset_ = 0;             // bytes of the events file already read
  std::shared_ptr<const NodeGpus> last_;  // the last successful Discover(), for event indices
};

}  // namespace tessera::agent
