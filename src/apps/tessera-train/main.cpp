// tessera-train: pretrain a model from a TOML config (+ --set overrides), on one or many ranks.
#include "tessera/cli/train_command.h"

int main(int argc, char** argv) { return tessera::cli::train_main(argc, argv); }
