// tessera-train: pretrain a model from a TOML config (+ --set overrides), on one or many ranks.
#include "tessera/cli/train_command.h"
#include "tessera/runtime/main_guard.h"

int main(int argc, char** argv) { return tessera::run_main(argc, argv, tessera::cli::train_command); }
