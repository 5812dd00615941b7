// tessera-train: pretrain a model from a TOML config (+ --set overrides), on one or many ranks.
#include "tessera/ckpt/exit_signal.h"
#include "tessera/cli/train_command.h"
#include "tessera/runtime/main_guard.h"

int main(int argc, char** argv) {
  // Before MPI or anything else starts a thread: SIGTERM / SIGUSR1 then wait for the trainer's main
  // thread (tessera/ckpt/exit_signal.h), which unblocks them if training.exit_signal_handler is off.
  tessera::ckpt::block_exit_signals_in_this_thread();
  return tessera::run_main(argc, argv, tessera::cli::train_command);
}
