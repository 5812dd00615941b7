// The command lines of Tessera's executables as library functions, so a program built against an
// installed Tessera (find_package(Tessera), examples/custom_loss) can register its own loss or
// model and then behave exactly like tessera-train.
#pragma once

namespace tessera::cli {

// tessera-train's whole command line (--config, --set, shortcuts, --help listing every config key,
// --version): loads the config and trains. Run it inside tessera::run_main (runtime/main_guard.h).
int train_command(int argc, char** argv);

// A whole trainer program's main: blocks SIGTERM / SIGUSR1 before MPI or anything else starts a thread
// (tessera/ckpt/exit_signal.h), then runs train_command inside run_main.
int train_main(int argc, char** argv);

}  // namespace tessera::cli
