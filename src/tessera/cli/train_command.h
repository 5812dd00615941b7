// The command lines of Tessera's executables as library functions, so a program built against an
// installed Tessera (find_package(Tessera), examples/custom_loss) can register its own loss or
// model and then behave exactly like tessera-train.
#pragma once

namespace tessera::cli {

// tessera-train's whole command line (--config, --set, shortcuts, --help listing every config key,
// --version): loads the config and trains. Run it inside tessera::run_main (runtime/main_guard.h).
int train_command(int argc, char** argv);

}  // namespace tessera::cli
