// tessera-convert: offline checkpoint conversion. import-hf (Hugging Face -> Tessera at a layout),
// export-hf (Tessera -> Hugging Face safetensors), reshard (Tessera at another TP / PP / DP layout
// or dtype) and inspect (every tensor of either kind). One process, tensor by tensor.
#include <mpi.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "tessera/convert/hf_export.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/inspect.h"
#include "tessera/convert/reshard.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"

namespace po = boost::program_options;
using namespace tessera;

namespace {

const char* kUsage =
    "Usage:\n"
    "  tessera-convert import-hf --input HF_DIR --output CKPT [layout options]\n"
    "  tessera-convert export-hf --input CKPT [--iteration N] --output HF_DIR [--max-shard-size 5GB]\n"
    "                            [--params-dtype fp32|bf16|fp16]\n"
    "  tessera-convert reshard --input CKPT --output CKPT2 [layout options] [--no-optim]\n"
    "  tessera-convert inspect PATH [--iteration N]     (= --print-checkpoint-structure PATH)\n"
    "Exit codes: 0 success, 2 usage / bad input (names the file and tensor), 1 runtime failure.\n";

po::options_description layout_options() {
  po::options_description o("layout options (import-hf, reshard)");
  o.add_options()("tensor-model-parallel-size", po::value<int64_t>()->default_value(1), "target TP size")(
      "pipeline-model-parallel-size", po::value<int64_t>()->default_value(1), "target PP size")(
      "num-layers-per-virtual-pipeline-stage", po::value<int64_t>()->default_value(0),
      "layers per virtual stage (interleaved 1F1B); 0: none")(
      "expert-model-parallel-size", po::value<int64_t>()->default_value(1), "target EP size (mixture-of-experts: reshard, import-hf of a mixtral)")(
      "data-parallel-size", po::value<int64_t>()->default_value(1),
      "target DP size (the distributed optimizer's state is split over it)")(
      "use-distributed-optimizer", "write the optimizer state as distributed-optimizer slices (DP > 1)")(
      "params-dtype", po::value<std::string>(), "fp32 | bf16 | fp16 (import default fp32; reshard keeps the saved one)")(
      "make-vocab-size-divisible-by", po::value<int64_t>(), "vocabulary padding multiple (import default 128)");
  return o;
}

po::options_description common_options() {
  po::options_description o("options");
  o.add_options()("help,h", "print this help and exit")("version", "print the version and exit")(
      "input", po::value<std::string>(), "input checkpoint (HF folder for import-hf, Tessera otherwise)")(
      "output", po::value<std::string>(), "output folder")(
      "iteration", po::value<int64_t>(), "read this iteration instead of the tracker's (export-hf, reshard, inspect)")(
      "max-shard-size", po::value<std::string>()->default_value("5GB"), "export-hf: largest safetensors shard")(
      "no-optim", "reshard: drop the optimizer state")(
      "print-checkpoint-structure", po::value<std::string>(), "= inspect PATH");
  return o;
}

convert::LayoutOptions layout_from(const po::variables_map& vm) {
  convert::LayoutOptions l;
  l.tensor_model_parallel_size = vm["tensor-model-parallel-size"].as<int64_t>();
  l.pipeline_model_parallel_size = vm["pipeline-model-parallel-size"].as<int64_t>();
  l.num_layers_per_virtual_pipeline_stage = vm["num-layers-per-virtual-pipeline-stage"].as<int64_t>();
  l.expert_model_parallel_size = vm["expert-model-parallel-size"].as<int64_t>();
  l.data_parallel_size = vm["data-parallel-size"].as<int64_t>();
  l.use_distributed_optimizer = vm.count("use-distributed-optimizer") > 0;
  if (vm.count("params-dtype")) l.params_dtype = vm["params-dtype"].as<std::string>();
  if (vm.count("make-vocab-size-divisible-by"))
    l.make_vocab_size_divisible_by = vm["make-vocab-size-divisible-by"].as<int64_t>();
  auto positive = [](int64_t v, const char* option) {
    if (v < 1) TESSERA_CONFIG_FAIL("--", option, " = ", v, " must be positive");
  };
  positive(l.tensor_model_parallel_size, "tensor-model-parallel-size");
  positive(l.pipeline_model_parallel_size, "pipeline-model-parallel-size");
  positive(l.expert_model_parallel_size, "expert-model-parallel-size");
  positive(l.data_parallel_size, "data-parallel-size");
  if (l.num_layers_per_virtual_pipeline_stage < 0)
    TESSERA_CONFIG_FAIL("--num-layers-per-virtual-pipeline-stage must be >= 0");
  if (l.make_vocab_size_divisible_by && *l.make_vocab_size_divisible_by < 1)
    TESSERA_CONFIG_FAIL("--make-vocab-size-divisible-by must be positive");
  return l;
}

std::string required(const po::variables_map& vm, const char* option, const std::string& command) {
  if (!vm.count(option)) TESSERA_CONFIG_FAIL(command, " needs --", option, "; see tessera-convert --help");
  return vm[option].as<std::string>();
}

int convert_command(int argc, char** argv);

// Under srun / mpirun with several ranks, import-hf and reshard share the work: each rank reads and
// writes the target's files k with k % ranks == its rank (convert/writer_ranks.h). export-hf and
// inspect run on rank 0 while the others wait. An error on any rank ends them all (run_main).
int convert_main(int argc, char** argv) {
  const int rc = convert_command(argc, argv);
  if (Runtime::get().world_size() > 1) TESSERA_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  return rc;
}

int convert_command(int argc, char** argv) {
  po::options_description all("tessera-convert");
  all.add(common_options()).add(layout_options());
  all.add_options()("command", po::value<std::string>(), "")("path", po::value<std::string>(), "");
  po::positional_options_description positional;
  positional.add("command", 1).add("path", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL(e.what(), "; see tessera-convert --help");
  }
  const bool out = log::is_output_rank();
  if (vm.count("help")) {
    if (out)
      std::cout << kUsage << "Hugging Face model types: " << convert::supported_model_types() << "\n\n"
                << common_options() << "\n" << layout_options();
    return 0;
  }
  if (vm.count("version")) {
    if (out) std::cout << "tessera-convert " << TESSERA_VERSION << "\n";
    return 0;
  }
  std::string command = vm.count("command") ? vm["command"].as<std::string>() : "";
  std::optional<int64_t> iteration;
  if (vm.count("iteration")) iteration = vm["iteration"].as<int64_t>();
  const convert::WriterRanks ranks = convert::WriterRanks::world();
  if (vm.count("print-checkpoint-structure")) {
    if (!command.empty()) TESSERA_CONFIG_FAIL("--print-checkpoint-structure takes no subcommand");
    if (!ranks.leader()) return 0;
    convert::inspect(vm["print-checkpoint-structure"].as<std::string>(), iteration, std::cout);
    return 0;
  }
  if (command.empty()) TESSERA_CONFIG_FAIL("no subcommand given; expected import-hf, export-hf, reshard or inspect\n", kUsage);
  if (command != "inspect" && vm.count("path"))
    TESSERA_CONFIG_FAIL(command, ": unexpected argument '", vm["path"].as<std::string>(), "'; see tessera-convert --help");
  if (command == "import-hf") {
    auto r = convert::import_hf(required(vm, "input", command), required(vm, "output", command), layout_from(vm),
                                ranks);
    log::info("imported ", r.tensors, " tensors into ", r.folder.string(), " (", r.bytes_written, " bytes)");
  } else if (command == "export-hf") {
    if (!ranks.leader()) return 0;
    convert::ExportOptions o;
    o.iteration = iteration;
    o.max_shard_bytes = convert::parse_size(vm["max-shard-size"].as<std::string>());
    if (vm.count("params-dtype")) o.params_dtype = vm["params-dtype"].as<std::string>();
    const std::string output = required(vm, "output", command);
    auto r = convert::export_hf(required(vm, "input", command), output, o);
    log::info("exported ", r.tensors, " tensors (", r.bytes, " bytes, ", r.shards, " shard", r.shards == 1 ? "" : "s",
              ") to ", output);
  } else if (command == "reshard") {
    auto r = convert::reshard(required(vm, "input", command), iteration, required(vm, "output", command),
                              layout_from(vm), vm.count("no-optim") > 0, ranks);
    log::info("resharded ", r.tensors, " tensors into ", r.folder.string());
  } else if (command == "inspect") {
    if (!vm.count("path")) TESSERA_CONFIG_FAIL("inspect needs PATH; see tessera-convert --help");
    if (!ranks.leader()) return 0;
    convert::inspect(vm["path"].as<std::string>(), iteration, std::cout);
  } else {
    TESSERA_CONFIG_FAIL("unknown subcommand '", command, "'; expected import-hf, export-hf, reshard or inspect");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, convert_main); }
