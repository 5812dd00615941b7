// The exit-signal flag: SIGTERM and SIGUSR1 (what Slurm sends before a time limit or a preemption)
// only set a flag; the trainer OR-reduces it over ranks after each iteration, saves and exits 0.
#pragma once

namespace tessera::ckpt {

void install_exit_signal_handler();  // SIGTERM and SIGUSR1; idempotent
bool exit_signal_received();
int exit_signal_number();             // the last signal received (0: none)
void clear_exit_signal();             // tests, and a trainer that has handled it

}  // namespace tessera::ckpt
