// The discovery backend for machines without GPUs: the GPUs a description file lists
// (fake_gpus_file.h). The file is read again on every Discover(), so a test or the node harness
// changes what the agent sees (a GPU turns unhealthy, MIG instances change) by rewriting it;
// Wait() returns early when the file changes.
#pragma once

#include <string>

#include "agent/discovery/discovery.h"

namespace tessera::agent {

class FakeDiscovery : public GpuDiscovery {
 public:
  explicit FakeDiscovery(std::string path) : path_(std::move(path)) {}

  std::string Describe() const override;
  absl::StatusOr<NodeGpus> Discover() override;
  absl::StatusOr<WaitResult> Wait(std::chrono::milliseconds timeout) override;

 private:
  // What identifies a version of the file: modification time, size, inode ("" if missing).
  std::string Stamp() const;

  std::string path_;
  std::string seen_stamp_;  // the stamp at the last Discover()
};

}  // namespace tessera::agent
