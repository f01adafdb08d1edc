// The agent in DRA mode (`tessera agent --dra`): the DRA driver gpu.tessera.dev on this node.
// Ties together what discovery finds (OnGpus, from the agent's publishing loop), the pool
// (pool.h), its ResourceSlices (slices.h), the kubelet plugin (plugin_server.h, driver.h).
//
// Run, on its own thread:
//   1. waits for the first discovery, restores what was prepared before a restart (driver.h
//      Restore: checkpoint, CDI specs, leftovers) and removes the classic extended resources
//      from the Node (DeviceClass extendedResourceName serves those pods in DRA mode);
//   2. publishes the pool's slices and starts the kubelet plugin;
//   3. then, until stopped: republishes the slices when the GPUs change, when the kubelet
//      registers the plugin again (a restarted kubelet deletes its node's slices) and every
//      `resync`; frees the shim's ledger slots of dead processes; and tells the pods of a
//      prepared claim that was deleted under them (Warning Event ResourceClaimDeleted on each pod:
//      the GPU stays theirs until they end).
// Stop removes the plugin's sockets and keeps the checkpoint and the CDI specs: running
// containers keep their devices and a restarted agent takes up where this one left off.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "agent/dra/driver.h"
#include "agent/dra/plugin_server.h"
#include "agent/dra/pool.h"
#include "agent/dra/slices.h"
#include "k8s/client/http.h"

namespace tessera::agent::dra {

struct DraAgentOptions {
  std::string node_name;
  std::string kubelet_dir = "/var/lib/kubelet";
  std::string cdi_dir = "/var/run/cdi";
  std::string claims_dir = "/run/tessera/claims";
  std::string sysfs_pci_dir = "/sys/bus/pci/devices";  // for resource.kubernetes.io/pcieRoot
  bool mig_devices = true;
  MigReconfigurer* mig = nullptr;  // the GPU backend's, when it can change MIG (driver.h)
  bool mig_mode_switch = false;    // driver.h DriverOptions::mig_mode_switch
  EditOptions edits;
  std::chrono::milliseconds resync{10'000};
  bool no_execute_on_failure = false;  // pool.h PoolOptions: the fault policy is evict
};

class DraAgent {
 public:
  DraAgent(k8s::ApiClient& client, DraAgentOptions options);
  ~DraAgent();

  // From the agent's loop, with every successful discovery.
  void OnGpus(std::shared_ptr<const NodeGpus> gpus);
  // Runs until `stop`; an error only if the plugin cannot start (the caller exits).
  [[nodiscard]] absl::Status Run(const std::atomic<bool>& stop);

  DraDriver& driver() { return driver_; }

 private:
  void ReportDeletedClaims();

  k8s::ApiClient& client_;
  DraAgentOptions options_;
  ApiClaimSource claims_;
  DraDriver driver_;
  SlicePublisher slices_;
  PluginServer plugin_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const NodeGpus> gpus_;
  std::shared_ptr<const Pool> pool_;
  bool gpus_changed_ = false;
  bool republish_ = false;
};

// PCI bus id (as discovery reports it) -> the PCIe root complex ("pci0000:16"), read from where
// sysfs links each PCI device (/sys/bus/pci/devices/<id> -> ../../../devices/pci0000:16/...).
// GPUs sysfs does not know (fake GPUs) are left out.
std::map<std::string, std::string> PcieRoots(const NodeGpus& gpus,
                                             const std::string& sysfs_pci_dir);

}  // namespace tessera::agent::dra
