// The exit-signal flag: SIGTERM and SIGUSR1 (what Slurm sends before a time limit or a preemption)
// only set a flag; the trainer OR-reduces it over ranks after each iteration, saves and exits 0.
//
// Which thread takes the signal: tessera-train blocks both signals in its main thread before anything
// starts a thread, so every thread (MPI's, CUDA's, the checkpoint workers) inherits the block and a
// signal stays pending for the process until the trainer's main thread takes it in
// exit_signal_received() after an iteration. A handler run on another thread would set the flag only
// when that thread is next scheduled, which on a loaded node can be several iterations later.
#pragma once

namespace tessera::ckpt {

void block_exit_signals_in_this_thread();    // threads this thread starts afterwards inherit the block
void unblock_exit_signals_in_this_thread();  // a pending one is then delivered (default: the process ends)
void install_exit_signal_handler();          // SIGTERM and SIGUSR1; idempotent
// The flag, or a signal pending for this thread that is taken now (when it blocks them).
bool exit_signal_received();
int exit_signal_number();             // the last signal received (0: none)
void clear_exit_signal();             // tests, and a trainer that has handled it

}  // namespace tessera::ckpt
