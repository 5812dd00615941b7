// tessera-bench: benchmarks of Tessera's building blocks. Sub-commands: comm (collectives), ckpt
// (checkpoint save / load bandwidth).
#include <boost/program_options.hpp>

#include <iostream>

#include "ckpt_bench.h"
#include "comm_bench.h"
#include "train_bench.h"
#include "tessera/core/error.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"

namespace po = boost::program_options;
using namespace tessera;

namespace {

int comm_main(const std::vector<std::string>& args) {
  bench::CommBenchOptions o;
  po::options_description desc("tessera-bench comm options");
  desc.add_options()
      ("help,h", "print this help and exit")
      ("backend", po::value(&o.backend)->default_value(o.backend), "mpi (host memory) | nccl (device memory)")
      ("op", po::value(&o.op)->default_value(o.op),
       "all_reduce | all_gather | reduce_scatter | broadcast | all_to_all")
      ("dtype", po::value(&o.dtype)->default_value(o.dtype), "f32 | bf16 | f16 | i32 | i64")
      ("min-bytes", po::value(&o.min_bytes)->default_value(o.min_bytes), "smallest message size (bytes)")
      ("max-bytes", po::value(&o.max_bytes)->default_value(o.max_bytes), "largest message size (bytes)")
      ("step-factor", po::value(&o.step_factor)->default_value(o.step_factor), "size multiplier between rows")
      ("iters", po::value(&o.iters)->default_value(o.iters), "timed iterations per size")
      ("warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed iterations per size")
      ("check", po::value(&o.check)->default_value(o.check), "verify the results (true | false)")
      ("blocking", po::value(&o.blocking)->default_value(o.blocking),
       "nccl: wait for each operation (true) or enqueue all and wait once (false)")
      ("raw-nccl", po::value(&o.raw_nccl)->default_value(o.raw_nccl),
       "nccl: also time the raw NCCL call on the same communicator, enqueue-all then wait (nccl-tests style)")
      ("timeout", po::value(&o.timeout_seconds)->default_value(o.timeout_seconds),
       "seconds before a stuck collective becomes an error (0: never)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL("tessera-bench comm: ", e.what(), " (see tessera-bench comm --help)");
  }
  if (vm.count("help")) {
    if (Runtime::get().world_rank() == 0)
      std::cout << "usage: mpirun -np N tessera-bench comm [options]\n"
                << "Prints per message size: time, algorithm bandwidth (bytes / time) and bus bandwidth\n"
                << "(algbw x nccl-tests' factor: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n,\n"
                << "broadcast 1, all_to_all (n-1)/n), and checks the results.\n\n"
                << desc << "\n";
    return 0;
  }
  return bench::run_comm_bench(o);
}

int ckpt_main(const std::vector<std::string>& args) {
  bench::CkptBenchOptions o;
  po::options_description desc("tessera-bench ckpt options");
  desc.add_options()
      ("help,h", "print this help and exit")
      ("dir", po::value(&o.dir)->default_value(o.dir), "checkpoint folder (default: a temporary folder, removed)")
      ("layers", po::value(&o.num_layers)->default_value(o.num_layers), "transformer layers")
      ("hidden", po::value(&o.hidden_size)->default_value(o.hidden_size), "hidden size")
      ("heads", po::value(&o.num_attention_heads)->default_value(o.num_attention_heads), "attention heads")
      ("vocab", po::value(&o.vocab_size)->default_value(o.vocab_size), "vocabulary size (padded as in training)")
      ("seq", po::value(&o.seq_length)->default_value(o.seq_length), "sequence length (position embeddings)")
      ("repeats", po::value(&o.repeats)->default_value(o.repeats), "save + load rounds");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL("tessera-bench ckpt: ", e.what(), " (see tessera-bench ckpt --help)");
  }
  if (o.repeats < 1) TESSERA_CONFIG_FAIL("tessera-bench ckpt: --repeats ", o.repeats, " must be >= 1");
  if (vm.count("help")) {
    std::cout << "usage: tessera-bench ckpt [options]\n"
              << "Builds a GPT (default GPT-2 small, 124M parameters) with AdamW state on the CPU, saves and\n"
              << "loads a checkpoint, and prints bytes, seconds and MB/s (1 MB = 1e6 bytes) as JSON lines.\n\n"
              << desc << "\n";
    return 0;
  }
  return bench::run_ckpt_bench(o);
}

int train_main(const std::vector<std::string>& args) {
  bench::TrainBenchOptions o;
  po::options_description desc("tessera-bench train options");
  desc.add_options()
      ("help,h", "print this help and exit")
      ("config", po::value(&o.config)->required(), "tessera-train TOML config (e.g. share/configs/bench/gpt2-124m.toml)")
      ("set", po::value(&o.overrides)->composing(), "override a key: table.key=value (repeatable)")
      ("label", po::value(&o.label)->default_value(o.label), "name printed in the JSON (default: the config file name)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      if (Runtime::get().world_rank() == 0)
        std::cout << "usage: [mpirun -np N] tessera-bench train --config FILE [--set table.key=value ...]\n"
                  << "Trains the config with the real Trainer and prints one JSON object: tokens/s, ms per step,\n"
                  << "TFLOP/s and MFU per device (6N + 12*L*h*s FLOPs per token), peak memory. The first iteration\n"
                  << "run (1, or the one after a loaded checkpoint) is not timed; the JSON names the timed ones.\n\n"
                  << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL("tessera-bench train: ", e.what(), " (see tessera-bench train --help)");
  }
  return bench::run_train_bench(o);
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    bool rank0 = Runtime::get().world_rank() == 0;
    if (args.empty() || args[0] == "--help" || args[0] == "-h") {
      if (rank0)
        std::cout << "usage: tessera-bench COMMAND [options]\n\ncommands:\n"
                  << "  comm    collective bandwidth through Tessera's communicators (tessera-bench comm --help)\n"
                  << "  ckpt    checkpoint save / load bandwidth (tessera-bench ckpt --help)\n"
                  << "  train   training throughput of a config (tessera-bench train --help)\n\n"
                  << "options:\n  --help     print this help and exit\n  --version  print the version and exit\n";
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "--version") {
      if (rank0) std::cout << "tessera-bench " << TESSERA_VERSION << "\n";
      return 0;
    }
    if (args[0] == "comm") return comm_main(std::vector<std::string>(args.begin() + 1, args.end()));
    if (args[0] == "ckpt") return ckpt_main(std::vector<std::string>(args.begin() + 1, args.end()));
    if (args[0] == "train") return train_main(std::vector<std::string>(args.begin() + 1, args.end()));
    TESSERA_CONFIG_FAIL("tessera-bench: unknown command \"", args[0],
                        "\"; allowed: comm, ckpt, train (see tessera-bench --help)");
  });
}
