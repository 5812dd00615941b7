#include "tessera/generate/model_loader.h"

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/models/model_registry.h"
#include "tessera/optim/distributed_optimizer.h"
#include "tessera/pipeline/pipeline_layout.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"
#include "tessera/tensor_parallel/tp_group.h"
#include "tessera/train/training_checkpoints.h"

namespace fs = std::filesystem;

namespace tessera::generate {

namespace {
std::string broadcast_string(std::string text) {
  int64_t size = static_cast<int64_t>(text.size());
  TESSERA_MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  text.resize(static_cast<size_t>(size));
  TESSERA_MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD));
  return text;
}

// An HF folder into a node-local temporary Tessera checkpoint (local rank 0 of each node imports).
fs::path import_hf_folder(const fs::path& hf_dir) {
  Runtime& runtime = Runtime::get();
  std::string name;
  if (runtime.world_rank() == 0)
    name = "tessera-generate-" + std::to_string(getpid()) + "-" +
           std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const fs::path dir = fs::temp_directory_path() / broadcast_string(name);
  int ok = 1;
  std::string error;
  if (runtime.local_rank() == 0) {
    try {
      convert::import_hf(hf_dir, dir, convert::LayoutOptions{});
    } catch (const std::exception& e) {
      ok = 0;
      error = e.what();
    }
  }
  int all_ok = 0;
  TESSERA_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!ok) TESSERA_CONFIG_FAIL(error);
  if (!all_ok) TESSERA_CONFIG_FAIL("importing the Hugging Face folder ", hf_dir.string(), " failed on another node");
  return dir;
}

int64_t hf_eos_token(const fs::path& hf_dir) {
  for (const char* file : {"generation_config.json", "config.json"}) {
    std::ifstream in(hf_dir / file);
    if (!in) continue;
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_discarded() && j.contains("eos_token_id") && j["eos_token_id"].is_number_integer())
      return j["eos_token_id"].get<int64_t>();
  }
  return -1;
}
}  // namespace

GenerationSetup::~GenerationSetup() {
  if (!imported.empty() && Runtime::initialized() && Runtime::get().local_rank() == 0) {
    std::error_code ignored;
    fs::remove_all(imported, ignored);
  }
}

namespace {
// The layout, this rank's model (weights uninitialised) and the tokenizer for config x.config.
void build_model(GenerationSetup& x, int64_t vocab) {
  Runtime& runtime = Runtime::get();
  x.device = runtime.select_device(x.config.training.device);
  train::resolve_default_precision(x.config, x.device.is_cuda());
  const auto& p = x.config.parallel;
  const int64_t model_parallel = p.tensor_model_parallel_size * p.pipeline_model_parallel_size;
  if (runtime.world_size() != model_parallel)
    TESSERA_CONFIG_FAIL("tessera-generate runs with data-parallel size 1: the world size (", runtime.world_size(),
                        ") must equal parallel.tensor_model_parallel_size x parallel.pipeline_model_parallel_size (",
                        p.tensor_model_parallel_size, " x ", p.pipeline_model_parallel_size, ")");
  x.context = std::make_unique<parallel::ParallelContext>(p, runtime.world_size(), runtime.world_rank(), x.device);
  models::ModelBuildArgs build;
  build.config = &x.config.model;
  build.vocab_size = vocab;
  build.dtype = optim::model_param_dtype(x.config.training.precision);
  build.device = x.device;
  build.tp = parallel::tensor_parallel_view(*x.context);
  build.pipeline_size = x.context->pp_size();
  build.chunks = parallel::pipeline_chunk_layouts(x.config.model.num_layers, p, x.context->pp_size(),
                                                  x.context->pp_rank());
  x.model = models::model_family(x.config.model.architecture).build(build);
  x.gpt = dynamic_cast<models::GPTModel*>(x.model.get());
  x.t5 = dynamic_cast<models::T5Model*>(x.model.get());
  if (x.t5 && model_parallel != 1)
    TESSERA_CONFIG_FAIL("tessera-generate runs model.architecture = t5 on one rank (tensor and pipeline parallel ",
                        "size 1), got TP x PP = ", model_parallel);
  if (!x.gpt && !x.t5)
    TESSERA_CONFIG_FAIL("model.architecture = ", x.config.model.architecture,
                        " has no generation support yet in tessera-generate (gpt and t5 have)");
}
}  // namespace

std::unique_ptr<GenerationSetup> load_for_generation(const std::string& load, const std::string& config_file,
                                                     const std::vector<std::string>& user_overrides, bool random_init) {
  auto setup = std::make_unique<GenerationSetup>();
  GenerationSetup& x = *setup;
  if (random_init) {
    std::vector<std::string> overrides = {"data.vocab_size=50257"};
    overrides.insert(overrides.end(), user_overrides.begin(), user_overrides.end());
    overrides.push_back("data.mock_data=true");
    overrides.push_back("logging.metrics_file=\"\"");
    x.config = train::load_config(config_file, overrides);
    build_model(x, x.config.data.vocab_size);
    x.model->initialize(static_cast<uint64_t>(x.config.training.seed));
    log::info("tessera-generate: random ", x.config.model.architecture, " (", x.config.model.num_layers,
              " layers, hidden ", x.config.model.hidden_size, ") at TP=", x.context->tp_size(), " PP=",
              x.context->pp_size(), " on ", x.device.name(), " in ", x.config.training.precision);
    return setup;
  }
  if (load.empty()) TESSERA_CONFIG_FAIL("tessera-generate needs --load CKPT (a Tessera checkpoint or an HF folder)");
  if (!fs::exists(load)) TESSERA_CONFIG_FAIL("--load ", load, ": no such checkpoint or folder");
  const fs::path hf_dir = fs::exists(fs::path(load) / "config.json") ? fs::path(load) : fs::path();
  fs::path checkpoint = load;
  if (!hf_dir.empty()) {
    x.imported = import_hf_folder(hf_dir);
    checkpoint = x.imported;
  }
  auto tracker = ckpt::read_tracker(checkpoint);
  if (!tracker)
    TESSERA_CONFIG_FAIL("--load ", load, ": neither a Tessera checkpoint (no latest_checkpointed_iteration.txt) nor a "
                        "Hugging Face folder (no config.json)");
  ckpt::CheckpointReader reader(ckpt::checkpoint_folder(checkpoint, *tracker));
  const int64_t vocab = convert::stored_vocab_size(reader);
  const std::string where = (reader.folder() / "common.h5").string();

  // The checkpoint's model and tokenizer keys, then the user's file and --set keys.
  std::vector<std::string> overrides = convert::stored_keys(reader.config_toml(), {"model"}, where);
  for (const std::string& kv : convert::stored_keys(reader.config_toml(), {"data"}, where))
    if (kv.rfind("data.tokenizer_type=", 0) == 0 || kv.rfind("data.vocab_file=", 0) == 0 ||
        kv.rfind("data.merge_file=", 0) == 0 || kv.rfind("data.tokenizer_model=", 0) == 0 ||
        kv.rfind("data.vocab_extra_ids=", 0) == 0)
      overrides.push_back(kv);
  if (!hf_dir.empty() && fs::exists(hf_dir / "vocab.json") && fs::exists(hf_dir / "merges.txt")) {
    overrides.push_back("data.tokenizer_type=\"GPT2BPETokenizer\"");
    overrides.push_back("data.vocab_file=\"" + (hf_dir / "vocab.json").string() + "\"");
    overrides.push_back("data.merge_file=\"" + (hf_dir / "merges.txt").string() + "\"");
  }
  overrides.insert(overrides.end(), user_overrides.begin(), user_overrides.end());
  overrides.push_back("data.mock_data=true");
  overrides.push_back("data.vocab_size=" + std::to_string(vocab));
  overrides.push_back("logging.metrics_file=\"\"");
  overrides.push_back("checkpoint.load=\"" + checkpoint.string() + "\"");
  overrides.push_back("checkpoint.finetune=true");
  overrides.push_back("checkpoint.save=\"\"");
  x.config = train::load_config(config_file, overrides);

  build_model(x, vocab);
  ckpt::TrainingCheckpoints(x.config, *x.context).load(*x.model, ckpt::TrainerOptimizer{});

  const auto& d = x.config.data;
  // SentencePieceTokenizer reads data.tokenizer_model; the others data.vocab_file (and merge_file).
  const bool sentencepiece = d.tokenizer_type == "SentencePieceTokenizer";
  if ((sentencepiece ? !d.tokenizer_model.empty() : !d.vocab_file.empty()) && d.tokenizer_type != "NullTokenizer") {
    data::TokenizerOptions options;
    options.type = d.tokenizer_type;
    options.vocab_file = d.vocab_file;
    options.merge_file = d.merge_file;
    options.tokenizer_model = d.tokenizer_model;
    options.vocab_extra_ids = d.vocab_extra_ids;  // T5's sentinels keep their ids
    x.tokenizer = data::make_tokenizer(options);
  }
  x.eod = x.tokenizer ? x.tokenizer->eod() : (!hf_dir.empty() ? hf_eos_token(hf_dir) : -1);
  log::info("tessera-generate: ", x.config.model.architecture, " (", x.config.model.num_layers, " layers, hidden ",
            x.config.model.hidden_size, ", vocabulary ", vocab, ") at TP=", x.context->tp_size(), " PP=",
            x.context->pp_size(), " on ", x.device.name(), " in ", x.config.training.precision);
  return setup;
}

}  // namespace tessera::generate
