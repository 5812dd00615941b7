#include "tessera/cli/train_command.h"

#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/exit_signal.h"
#include "tessera/convert/start_point.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/config.h"
#include "tessera/train/config_consistency.h"
#include "tessera/train/trainer.h"

namespace po = boost::program_options;

namespace {

struct Shortcut {
  const char* option;
  const char* key;
  const char* help;
};

const Shortcut kShortcuts[] = {
    {"tp", "parallel.tensor_model_parallel_size", "tensor-parallel size"},
    {"pp", "parallel.pipeline_model_parallel_size", "pipeline-parallel size"},
    {"micro-batch-size", "training.micro_batch_size", "sequences per micro-batch"},
    {"global-batch-size", "training.global_batch_size", "sequences per step"},
    {"train-iters", "training.train_iters", "optimizer steps"},
    {"lr", "optimizer.lr", "peak learning rate"},
    {"seed", "training.seed", "random seed"},
    {"device", "training.device", "auto | cpu | cuda"},
    {"precision", "training.precision", "fp32 | bf16 | fp16"},
    {"log-interval", "logging.log_interval", "iterations between log lines"},
    {"metrics-file", "logging.metrics_file", "JSON Lines metrics file"},
    {"data-path", "data.data_path", "one dataset prefix"},
};

std::string config_keys_help() {
  std::ostringstream out;
  out << "\nConfig keys (TOML tables; set in the file or with --set table.key=value):\n";
  std::string section;
  for (const auto& spec : tessera::train::config_schema()) {
    if (spec.section != section) {
      section = spec.section;
      out << "  [" << section << "]\n";
    }
    out << "    " << spec.key << " = " << tessera::train::format_value(spec.default_value) << "    # " << spec.help;
    if (!spec.unsupported_reason.empty()) out << " (other values: not supported yet)";
    out << "\n";
  }
  return out.str();
}

}  // namespace

namespace tessera::cli {

int train_command(int argc, char** argv) {
  po::options_description options("tessera-train options");
  options.add_options()("help,h", "print this help (options and every config key with its default) and exit")(
      "version", "print the version and exit")("config,c", po::value<std::string>()->default_value(""),
                                               "TOML config file (empty: defaults only)")(
      "set", po::value<std::vector<std::string>>()->composing()->default_value({}, ""),
      "override a config key: --set table.key=value (repeatable, highest precedence)")(
      "print-config", "print the resolved config and exit")(
      "eval-only", "load checkpoint.load (or checkpoint.pretrained_hf) and evaluate instead of training: loss and "
      "perplexity of the first training.eval_iters global batches of --eval-split")(
      "eval-split", po::value<std::string>()->default_value("valid"), "valid | test (with --eval-only)")(
      "logits-file", po::value<std::string>()->default_value(""),
      "with --eval-only: write each evaluated sample's top-k logits per token here (JSON Lines)")(
      "logits-top-k", po::value<int64_t>()->default_value(10), "logits per token in --logits-file (0: all)");
  for (const auto& s : kShortcuts)
    options.add_options()(s.option, po::value<std::string>(), (std::string(s.help) + " (= --set " + s.key + ")").c_str());

  // Words without an option are collected only to be refused: "tessera-train my.toml" must not
  // silently train the defaults.
  po::options_description hidden;
  hidden.add_options()("positional", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(options).add(hidden);
  po::positional_options_description positional;
  positional.add("positional", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    TESSERA_CONFIG_FAIL(e.what(), "; see tessera-train --help");
  }
  if (vm.count("help")) {
    if (tessera::log::is_output_rank())
      std::cout << "Usage: tessera-train --config FILE.toml [--set table.key=value ...]\n\n"
                << options << config_keys_help();
    return 0;
  }
  if (vm.count("version")) {
    if (tessera::log::is_output_rank()) std::cout << "tessera-train " << TESSERA_VERSION << "\n";
    return 0;
  }
  if (vm.count("positional")) {
    const auto& words = vm["positional"].as<std::vector<std::string>>();
    TESSERA_CONFIG_FAIL("unexpected argument '", words.front(), "'", words.size() > 1 ? " (and more)" : "",
                        "; give the config file as --config ", words.front(),
                        " and overrides as --set table.key=value; see tessera-train --help");
  }
  std::vector<std::string> overrides;
  for (const auto& s : kShortcuts)
    if (vm.count(s.option)) overrides.push_back(std::string(s.key) + "=" + vm[s.option].as<std::string>());
  for (const auto& o : vm["set"].as<std::vector<std::string>>()) overrides.push_back(o);

  // The checkpoint (or checkpoint.pretrained_hf model) the run starts from supplies the [model]
  // keys the user did not set. The first load only finds it: there EP is 1, since
  // parallel.expert_model_parallel_size is checked against model.num_experts, which the checkpoint
  // may be the one to give (a MoE checkpoint finetuned at EP > 1 without repeating its model keys).
  std::vector<std::string> first = overrides;
  first.push_back("parallel.expert_model_parallel_size=1");
  tessera::train::Config config = tessera::train::load_config_on_all_ranks(vm["config"].as<std::string>(), first);
  if (auto start = tessera::convert::start_point(config, overrides); !start.empty()) {
    std::vector<std::string> all = start.defaults;
    all.insert(all.end(), overrides.begin(), overrides.end());
    all.insert(all.end(), start.forced.begin(), start.forced.end());
    config = tessera::train::load_config_on_all_ranks(vm["config"].as<std::string>(), all);
  } else {
    config = tessera::train::load_config_on_all_ranks(vm["config"].as<std::string>(), overrides);
  }
  if (vm.count("print-config")) {
    if (tessera::log::is_output_rank()) std::cout << config.to_toml();
    return 0;
  }
  tessera::train::validate_for_world_on_all_ranks(config);
  const bool eval_only = vm.count("eval-only") > 0;
  const std::string eval_split = vm["eval-split"].as<std::string>();
  if (eval_split != "valid" && eval_split != "test")
    TESSERA_CONFIG_FAIL("--eval-split ", eval_split, " is not allowed; allowed: valid, test");
  // (checkpoint.pretrained_hf was imported by start_point and is checkpoint.load by now.)
  if (eval_only && (config.checkpoint.load.empty() || !tessera::ckpt::read_tracker(config.checkpoint.load)))
    TESSERA_CONFIG_FAIL("--eval-only needs a checkpoint to evaluate: checkpoint.load = \"", config.checkpoint.load,
                        "\" holds none (no latest_checkpointed_iteration.txt); set checkpoint.load or "
                        "checkpoint.pretrained_hf");
  for (const char* option : {"eval-split", "logits-file", "logits-top-k"})
    if (!eval_only && !vm[option].defaulted())
      TESSERA_CONFIG_FAIL("--", option, " applies to --eval-only runs; add --eval-only or remove it");
  auto& runtime = tessera::Runtime::get();
  // Data, tensor (+ sequence) and pipeline parallel layouts are supported; the Trainer checks that
  // the layout fits the world size and the model (validate_for_world, tensor_parallel_view).
  tessera::Device device = runtime.select_device(config.training.device);
  tessera::train::Trainer trainer(config, device);
  if (eval_only) {
    trainer.evaluate_checkpoint(
        eval_split == "valid" ? tessera::train::EvalSplit::valid : tessera::train::EvalSplit::test,
        vm["logits-file"].as<std::string>(), vm["logits-top-k"].as<int64_t>());
    return 0;
  }
  trainer.train();
  return 0;
}

int train_main(int argc, char** argv) {
  // SIGTERM / SIGUSR1 then wait for the trainer's main thread, which unblocks them if
  // training.exit_signal_handler is off.
  ckpt::block_exit_signals_in_this_thread();
  return run_main(argc, argv, train_command);
}

}  // namespace tessera::cli
