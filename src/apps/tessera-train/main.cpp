// tessera-train: pretrain a GPT from a TOML config (+ --set overrides), on one or many ranks.
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

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

int train_main(int argc, char** argv) {
  po::options_description options("tessera-train options");
  options.add_options()("help,h", "print this help (options and every config key with its default) and exit")(
      "version", "print the version and exit")("config,c", po::value<std::string>()->default_value(""),
                                               "TOML config file (empty: defaults only)")(
      "set", po::value<std::vector<std::string>>()->composing()->default_value({}, ""),
      "override a config key: --set table.key=value (repeatable, highest precedence)")(
      "print-config", "print the resolved config and exit");
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

  tessera::train::Config config = tessera::train::load_config_on_all_ranks(vm["config"].as<std::string>(), overrides);
  // The checkpoint (or checkpoint.pretrained_hf model) the run starts from supplies the [model]
  // keys the user did not set.
  if (auto start = tessera::convert::start_point(config, overrides); !start.empty()) {
    std::vector<std::string> all = start.defaults;
    all.insert(all.end(), overrides.begin(), overrides.end());
    all.insert(all.end(), start.forced.begin(), start.forced.end());
    config = tessera::train::load_config_on_all_ranks(vm["config"].as<std::string>(), all);
  }
  if (vm.count("print-config")) {
    if (tessera::log::is_output_rank()) std::cout << config.to_toml();
    return 0;
  }
  tessera::train::validate_for_world_on_all_ranks(config);
  auto& runtime = tessera::Runtime::get();
  // Data, tensor (+ sequence) and pipeline parallel layouts are supported; the Trainer checks that
  // the layout fits the world size and the model (validate_for_world, tensor_parallel_view).
  tessera::Device device = runtime.select_device(config.training.device);
  tessera::train::Trainer trainer(config, device);
  trainer.train();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tessera::run_main(argc, argv, train_main); }
