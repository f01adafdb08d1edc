// The agent's segment steps for the GPU check (scripts/gpu_shim_check.py), built from the shim's
// own accounting core so that it needs nothing but a C++ compiler on the GPU machine:
//   segment_tool create POD_DIR GPU_UUID MEMORY_BYTES [COMPUTE_PERMILLE [MODE [PERIOD_US]]]
//   segment_tool schedule POD_DIR GPU_UUID DUTY_PERMILLE PHASE_PERMILLE
//   segment_tool inspect POD_DIR GPU_UUID      -> {"used":..,"processes":[{"pid","used","alive"}]}
//   segment_tool reap POD_DIR GPU_UUID         -> {"slots":..,"bytes":..}
// MODE: hard (default) or work-conserving. The agent itself uses src/shim/segments.h.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shim/contract.h"
#include "shim/ledger.h"
#include "shim/limits.h"

using namespace tessera::shim;

namespace {

std::string LimitsPath(const std::string& pod, const std::string& uuid) {
  return pod + "/" + contract::kLimitsSubdir + "/" + uuid + contract::kLimitsSuffix;
}
std::string LedgerPath(const std::string& pod, const std::string& uuid) {
  return pod + "/" + contract::kLedgerSubdir + "/" + uuid + contract::kLedgerSuffix;
}

int Fail(const std::string& error) {
  std::fprintf(stderr, "segment_tool: %s\n", error.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: segment_tool create|schedule|inspect|reap POD_DIR GPU_UUID ...\n");
    return 2;
  }
  const std::string cmd = argv[1], pod = argv[2], uuid = argv[3];
  std::string error;
  if (cmd == "create" && argc >= 5) {
    ShareLimits limits;
    limits.memory_limit_bytes = std::strtoull(argv[4], nullptr, 10);
    if (argc > 5) limits.compute_limit_permille = static_cast<uint32_t>(std::atoi(argv[5]));
    if (argc > 6 && std::strcmp(argv[6], "work-conserving") == 0) {
      limits.compute_mode = ComputeMode::kWorkConserving;
    }
    if (argc > 7) limits.period_us = static_cast<uint32_t>(std::atoi(argv[7]));
    ::mkdir(pod.c_str(), 0755);
    ::mkdir((pod + "/" + contract::kLimitsSubdir).c_str(), 0755);
    ::mkdir((pod + "/" + contract::kLedgerSubdir).c_str(), 0777);
    ::chmod((pod + "/" + contract::kLedgerSubdir).c_str(), 0777);
    if (!LimitsMap::Create(LimitsPath(pod, uuid), uuid, "gpu-check", limits, &error)) {
      return Fail(error);
    }
    if (!Ledger::Create(LedgerPath(pod, uuid), uuid, kDefaultLedgerSlots, &error)) {
      return Fail(error);
    }
    return 0;
  }
  if (cmd == "schedule" && argc == 6) {
    auto limits = LimitsMap::Open(LimitsPath(pod, uuid), /*writable=*/true, &error);
    if (limits == nullptr) return Fail(error);
    limits->SetSchedule(static_cast<uint32_t>(std::atoi(argv[4])),
                        static_cast<uint32_t>(std::atoi(argv[5])));
    return 0;
  }
  auto ledger = Ledger::Open(LedgerPath(pod, uuid), &error);
  if (ledger == nullptr) return Fail(error);
  if (cmd == "inspect") {
    std::printf("{\"used\":%llu,\"peak\":%llu,\"oom\":%llu,\"processes\":[",
                static_cast<unsigned long long>(ledger->Used()),
                static_cast<unsigned long long>(ledger->header()->peak_used_bytes.load()),
                static_cast<unsigned long long>(ledger->header()->oom_count.load()));
    bool first = true;
    for (const SlotInfo& s : ledger->Slots(/*check_alive=*/true)) {
      std::printf("%s{\"pid\":%u,\"used\":%llu,\"alive\":%s}", first ? "" : ",", s.pid,
                  static_cast<unsigned long long>(s.used_bytes), s.alive ? "true" : "false");
      first = false;
    }
    std::printf("]}\n");
    return 0;
  }
  if (cmd == "reap") {
    ReclaimResult r = ledger->ReclaimDead();
    std::printf("{\"slots\":%u,\"bytes\":%llu}\n", r.slots,
                static_cast<unsigned long long>(r.bytes));
    return 0;
  }
  return Fail("unknown command " + cmd);
}
