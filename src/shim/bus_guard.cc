#include "shim/bus_guard.h"

#include <signal.h>

#include <atomic>
#include <mutex>

namespace tessera::shim {
namespace bus_guard_internal {
namespace {

thread_local Frame* t_current = nullptr;  // a plain pointer: no dynamic initialisation
struct sigaction g_previous {};
std::atomic<unsigned long> g_caught{0};

extern "C" void OnBusError(int signo, siginfo_t* info, void* context) {
  if (Frame* frame = t_current; frame != nullptr) {
    g_caught.fetch_add(1, std::memory_order_relaxed);
    siglongjmp(frame->env, 1);
  }
  // Not ours: what was there before.
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signo, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(signo);
    return;
  }
  // The default action: returning re-executes the faulting access, which now kills the process
  // with SIGBUS as if no handler had been installed.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
}

}  // namespace

Frame*& Current() { return t_current; }

void InstallHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnBusError;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous);
  });
}

}  // namespace bus_guard_internal

unsigned long BusErrorsCaught() {
  return bus_guard_internal::g_caught.load(std::memory_order_relaxed);
}

}  // namespace tessera::shim
