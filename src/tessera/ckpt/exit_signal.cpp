// SIGTERM / SIGUSR1 handler that records the signal in a sig_atomic_t flag (async-signal-safe).
#include "tessera/ckpt/exit_signal.h"

#include <csignal>

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace {
volatile std::sig_atomic_t received_signal = 0;
void on_exit_signal(int signal) { received_signal = signal; }
}  // namespace

void install_exit_signal_handler() {
  struct sigaction action = {};
  action.sa_handler = on_exit_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGUSR1})
    TESSERA_CHECK(sigaction(signal, &action, nullptr) == 0, "cannot install the handler of signal ", signal);
}

bool exit_signal_received() { return received_signal != 0; }
int exit_signal_number() { return received_signal; }
void clear_exit_signal() { received_signal = 0; }

}  // namespace tessera::ckpt
