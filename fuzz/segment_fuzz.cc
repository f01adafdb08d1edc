// The agent's reads of a pod's ledger and limits files (shim/segments.h) never crash, never read
// or write outside what they validated, and put a changed header back, whatever the pod's
// processes do to the files between and during the agent's reads. The input is a script: each
// step either rewrites the files as a hostile container can (bytes anywhere, the slot count, the
// live bits, truncating or growing the ledger) or runs the agent (Reap, Inspect, a restart that
// opens the segment again). The last part of the input is replayed by a second thread while the
// agent reads, so that a truncation lands in the middle of a read. Under ASan (the fuzz preset)
// and as a unit test (fuzz/driver.cc, with the seed scripts of fuzz/corpus/segment).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "shim/files_at.h"
#include "shim/ledger.h"
#include "shim/segments.h"

namespace {

using namespace tessera::shim;

constexpr char kUuid[] = "GPU-f0220000-0000-4000-8000-000000000000";

struct Script {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool done() const { return at >= size; }
  uint8_t Byte() { return at < size ? data[at++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  uint32_t U32() { return uint32_t{U16()} | (uint32_t{U16()} << 16); }
};

const std::string& Root() {
  // Never destroyed: the atexit handler registered while it is made runs after the destructors of
  // statics made later, this one included (ASan: heap-use-after-free at exit).
  static const std::string* const root = [] {
    char tmpl[] = "/tmp/tessera-segment-fuzz-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    std::atexit([] { (void)RemoveTree(Root()); });
    return new std::string(tmpl);
  }();
  return *root;
}

// What a container can do to its files (it has the ledger read-write, the limits read-only; the
// limits are rewritten too, to cover the agent's reads of them had it been given more).
void Mutate(Script& s, int ledger, int limits) {
  switch (s.Byte() % 6) {
    case 0: {  // bytes anywhere in the ledger (header, live bits, slots), or past its end
      const uint16_t offset = s.U16();
      const uint8_t length = s.Byte() % 64;
      uint8_t bytes[64];
      for (int i = 0; i < length; ++i) bytes[i] = s.Byte();
      (void)!::pwrite(ledger, bytes, length, offset);
      break;
    }
    case 1:  // truncate or grow the ledger
      (void)!::ftruncate(ledger, static_cast<off_t>(s.U16()) * 8);
      break;
    case 2: {  // the slot count
      const uint32_t count = s.U32();
      (void)!::pwrite(ledger, &count, sizeof(count), offsetof(LedgerHeader, slot_count));
      break;
    }
    case 3: {  // live bits
      const uint64_t bits = uint64_t{s.U32()} << 32 | s.U32();
      const uint8_t word = s.Byte() % (kMaxLedgerSlots / 64);
      (void)!::pwrite(ledger, &bits, sizeof(bits),
                      offsetof(LedgerHeader, live_bitmap) + word * sizeof(uint64_t));
      break;
    }
    case 4: {  // a slot: live, with made-up bytes and identity
      LedgerSlot slot{};
      slot.used_bytes = uint64_t{s.U32()} << s.Byte() % 32;
      slot.state = s.Byte() % 3;
      slot.pid = s.U32();
      slot.pidns_inode = s.U32();
      slot.host_pid = s.U32();
      (void)!::pwrite(ledger, &slot, sizeof(slot), LockOffset(s.Byte()));
      break;
    }
    default: {  // the limits file
      const uint16_t offset = s.U16() % 4200;
      const uint32_t value = s.U32();
      (void)!::pwrite(limits, &value, sizeof(value), offset);
      break;
    }
  }
}

void CheckAgentView(Segment& seg, uint32_t slots) {
  SegmentInfo info = seg.Inspect();
  if (info.slots != slots || info.processes.size() > slots) std::abort();
  for (const ProcessUsage& p : info.processes) {
    if (p.slot >= slots) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Script s{data, size};
  const std::string pod = Root() + "/pod";
  (void)RemoveTree(pod);
  SegmentOptions options;
  options.pod_uid = "8d1c0a2e-5f2b-4c1e-9d7a-2b6c8e1f4a10";
  options.limits.memory_limit_bytes = 1ull << 30;
  options.limits.compute_limit_permille = 300;
  options.slots = 1 + s.Byte() % 130;
  auto seg = Segment::Create(pod, kUuid, options);
  if (!seg.ok()) std::abort();
  const SegmentPaths paths = PathsFor(pod, kUuid);
  const int ledger = ::open(paths.ledger.c_str(), O_RDWR | O_CLOEXEC);
  const int limits = ::open(paths.limits.c_str(), O_RDWR | O_CLOEXEC);
  if (ledger < 0 || limits < 0) std::abort();
  std::unique_ptr<Segment> agent = std::move(*seg);
  const HostPidLookup nobody = [](uint64_t, uint32_t) { return std::optional<uint32_t>(); };

  // Steps, one after the other.
  const size_t concurrent_from = size - size / 4;
  while (!s.done() && s.at < concurrent_from) {
    const uint8_t op = s.Byte();
    if (op < 160) {
      Mutate(s, ledger, limits);
    } else if (op < 200) {
      ReapResult r = agent->Reap(nobody);
      // Nothing changed the file since: the agent put back the header and the length.
      struct stat st {};
      if (::fstat(ledger, &st) != 0 ||
          static_cast<uint64_t>(st.st_size) != LedgerFileSize(options.slots)) {
        std::abort();
      }
      LedgerHeader h;
      if (::pread(ledger, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) std::abort();
      if (!DescribeHeaderChange(agent->ledger().shape(), h, st.st_size).empty()) std::abort();
      (void)r;
    } else if (op < 240) {
      CheckAgentView(*agent, options.slots);
    } else {
      // The agent restarts: the segment is opened again from whatever the files hold now (a
      // broken header is put back; a file of another kind is replaced). It never crashes; it may
      // refuse.
      agent.reset();
      auto again = Segment::Create(pod, kUuid, options);
      if (!again.ok()) return 0;
      agent = std::move(*again);
    }
  }
  // The rest, replayed by the "container" while the agent reads.
  std::atomic<bool> stop{false};
  Script rest{data, size, s.at};
  std::thread container([&] {
    for (int round = 0; round < 8 && !stop.load(); ++round) {
      Script r = rest;
      while (!r.done()) Mutate(r, ledger, limits);
    }
  });
  for (int i = 0; i < 16; ++i) {
    (void)agent->Reap(nobody);
    CheckAgentView(*agent, options.slots);
  }
  stop.store(true);
  container.join();
  (void)agent->Reap(nobody);
  CheckAgentView(*agent, options.slots);
  // The shim's own parse of whatever is left.
  std::string error;
  (void)Ledger::Open(paths.ledger, &error);
  (void)LimitsMap::Open(paths.limits, false, &error);
  ::close(ledger);
  ::close(limits);
  return 0;
}
