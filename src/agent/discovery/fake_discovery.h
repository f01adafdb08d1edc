// The discovery backend for machines without GPUs: the GPUs a description file lists
// (fake_gpus_file.h). The file is read again on every Discover(), so a test or the node harness
// changes what the agent sees (a GPU turns unhealthy, MIG instances change) by rewriting it;
// Wait() returns early when the file changes. It also carries out MIG plans by rewriting the file
// (MigReconfigurer): the instances the plan destroys go, the new one comes with a generated
// device UUID, so the file is the fake GPUs' state as the driver's would be.
#pragma once

#include <mutex>
#include <string>

#include "agent/discovery/discovery.h"

namespace tessera::agent {

class FakeDiscovery : public GpuDiscovery, public MigReconfigurer {
 public:
  explicit FakeDiscovery(std::string path) : path_(std::move(path)) {}

  std::string Describe() const override;
  absl::StatusOr<NodeGpus> Discover() override;
  absl::StatusOr<WaitResult> Wait(std::chrono::milliseconds timeout) override;
  absl::StatusOr<DiscoveredGpu> ReconfigureMig(
      const std::string& uuid, const std::vector<records::MigInstanceRecord>& destroy,
      const records::MigInstanceRecord& create) override;

 private:
  // What identifies a version of the file: modification time, size, inode ("" if missing).
  std::string Stamp() const;

  std::string path_;
  std::mutex mig_mu_;       // one MIG change at a time
  std::string seen_stamp_;  // the stamp at the last Discover()
};

}  // namespace tessera::agent
