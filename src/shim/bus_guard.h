// Touching a shared mapping of a file that someone else shrank raises SIGBUS, which kills the
// process. The agent maps every pod's ledger (segment_format.h), and the pod's containers map the
// same file read-write: any of them can truncate it at any moment. RunCatchingBusErrors runs the
// agent's accesses to such mappings so that a SIGBUS raised inside them ends the access early
// (it returns false) instead of the agent.
//
// Rules for a guarded body (the jump out of the signal handler skips everything in between):
//   - it touches only memory and makes no call that takes a lock or allocates while it touches
//     the mapping (copy out first, then build strings and containers outside);
//   - whatever it wrote before the fault may be half done: the mapping's protocol must tolerate
//     that (the ledger's does: a slot half freed is freed again by the next reap).
// A SIGBUS outside any guard keeps its usual effect (the handler that was installed before, or the
// default action). One handler per process, installed on first use; the guards are per thread.
//
// Example:
//   uint64_t used = 0;
//   if (!RunCatchingBusErrors([&] { used = SumOfSlots(map); })) { ... the file was truncated ... }
#pragma once

#include <setjmp.h>

#include <utility>

namespace tessera::shim {

namespace bus_guard_internal {
struct Frame {
  sigjmp_buf env;
  Frame* previous = nullptr;
};
// The innermost guard of the calling thread (nullptr: none).
Frame*& Current();
void InstallHandler();
}  // namespace bus_guard_internal

// Runs `body`; false if it was cut short by a SIGBUS.
template <typename Body>
[[nodiscard]] bool RunCatchingBusErrors(Body&& body) {
  bus_guard_internal::InstallHandler();
  bus_guard_internal::Frame frame;
  frame.previous = bus_guard_internal::Current();
  // The handler runs with SA_NODEFER, so SIGBUS is not blocked after the jump: the mask need not
  // be saved (which would cost a system call per guard).
  if (sigsetjmp(frame.env, 0) != 0) {
    bus_guard_internal::Current() = frame.previous;
    return false;
  }
  bus_guard_internal::Current() = &frame;
  std::forward<Body>(body)();
  bus_guard_internal::Current() = frame.previous;
  return true;
}

// How many guarded accesses were cut short in this process (for the agent's metrics and tests).
unsigned long BusErrorsCaught();

}  // namespace tessera::shim
