// SIGTERM / SIGUSR1 handler that records the signal in a sig_atomic_t flag (async-signal-safe), and
// the thread mask that keeps both pending for the main thread (exit_signal.h).
#include "tessera/ckpt/exit_signal.h"

#include <pthread.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace {
volatile std::sig_atomic_t received_signal = 0;
void on_exit_signal(int signal) { received_signal = signal; }

sigset_t exit_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

void change_mask(int how, const char* what) {
  const sigset_t set = exit_signals();
  const int rc = pthread_sigmask(how, &set, nullptr);
  TESSERA_CHECK(rc == 0, "cannot ", what, " SIGTERM and SIGUSR1 in this thread: ", std::strerror(rc));
}
}  // namespace

void block_exit_signals_in_this_thread() { change_mask(SIG_BLOCK, "block"); }
void unblock_exit_signals_in_this_thread() { change_mask(SIG_UNBLOCK, "unblock"); }

void install_exit_signal_handler() {
  struct sigaction action = {};
  action.sa_handler = on_exit_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGUSR1})
    TESSERA_CHECK(sigaction(signal, &action, nullptr) == 0, "cannot install the handler of signal ", signal);
}

bool exit_signal_received() {
  if (received_signal == 0) {
    // Take a signal that waits for this thread (it blocks them; otherwise the handler ran already).
    const sigset_t set = exit_signals();
    const timespec no_wait{0, 0};
    const int signal = sigtimedwait(&set, nullptr, &no_wait);
    if (signal > 0) received_signal = signal;
    else TESSERA_CHECK(errno == EAGAIN || errno == EINTR, "sigtimedwait(SIGTERM, SIGUSR1): ", std::strerror(errno));
  }
  return received_signal != 0;
}
int exit_signal_number() { return received_signal; }
void clear_exit_signal() { received_signal = 0; }

}  // namespace tessera::ckpt
