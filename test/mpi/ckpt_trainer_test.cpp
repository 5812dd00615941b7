// Checkpoints through the Trainer with a real GPT under mpirun (label mpi), driven by ckpt_trainer.sh:
//   run ITERS OUT [key=value...]     trains to ITERS (resuming when checkpoint.load is set); rank 0
//                                    writes "iteration lm_loss" for every iteration it ran to OUT
//   compare RUN REF TOL              every iteration of RUN must be in REF within TOL (relative;
//                                    TOL 0: bitwise); at least one iteration compared
//   exact DIR [key=value...]         20 iterations straight == 10, save, load, 10 more, bitwise
//                                    (lm_loss, grad norm), in this layout
//   corrupt FILE DATASET             flips bytes in the middle of DATASET's raw data in FILE
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/core/error.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

// A small GPT on mock data, dropout on, global batch 8 (micro-batch 2): 4 heads and a hidden size
// that TP=4 divides, 2 layers for PP=2.
std::vector<std::string> base_overrides() {
  return {"data.mock_data=true",          "data.vocab_size=50",          "model.num_layers=2",
          "model.hidden_size=32",         "model.num_attention_heads=4", "model.seq_length=16",
          "training.micro_batch_size=2",  "training.global_batch_size=8", "training.eval_interval=0",
          "optimizer.lr=1e-3",            "optimizer.lr_warmup_iters=2", "optimizer.lr_decay_iters=20",
          "optimizer.clip_grad=0.5",      "logging.log_interval=1000",   "training.seed=4321"};
}

train::TrainingSummary train_to(int64_t iters, std::vector<std::string> extra) {
  std::vector<std::string> overrides = base_overrides();
  overrides.push_back("training.train_iters=" + std::to_string(iters));
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return train::Trainer(train::load_config("", overrides), Device::cpu()).train();
}

int run(int argc, char** argv) {
  TESSERA_CHECK(argc >= 4, "usage: run ITERS OUT [key=value...]");
  const int64_t iters = std::stoll(argv[2]);
  auto summary = train_to(iters, std::vector<std::string>(argv + 4, argv + argc));
  if (Runtime::get().world_rank() == 0) {
    std::ofstream out(argv[3]);
    TESSERA_CHECK(out.good(), "cannot write ", argv[3]);
    const int64_t first = iters - static_cast<int64_t>(summary.lm_loss.size()) + 1;
    char line[64];
    for (size_t i = 0; i < summary.lm_loss.size(); ++i) {
      std::snprintf(line, sizeof line, "%lld %.17g\n", static_cast<long long>(first + static_cast<int64_t>(i)),
                    summary.lm_loss[i]);
      out << line;
    }
    std::printf("ran iterations %lld..%lld\n", static_cast<long long>(first), static_cast<long long>(iters));
  }
  return 0;
}

std::map<int64_t, double> read_losses(const std::string& path) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), "cannot read ", path);
  std::map<int64_t, double> losses;
  int64_t iteration;
  double loss;
  while (in >> iteration >> loss) losses[iteration] = loss;
  return losses;
}

int compare(int argc, char** argv) {
  TESSERA_CHECK(argc == 5, "usage: compare RUN REF TOL");
  auto run_losses = read_losses(argv[2]), reference = read_losses(argv[3]);
  const double tolerance = std::stod(argv[4]);
  TESSERA_CHECK(!run_losses.empty(), argv[2], " holds no iterations");
  int failures = 0;
  double worst = 0;
  for (const auto& [iteration, loss] : run_losses) {
    auto it = reference.find(iteration);
    TESSERA_CHECK(it != reference.end(), "iteration ", iteration, " of ", argv[2], " is not in ", argv[3]);
    const double relative = std::abs(loss - it->second) / std::max(std::abs(it->second), 1e-30);
    worst = std::max(worst, relative);
    const bool ok = tolerance == 0 ? loss == it->second : relative <= tolerance;
    if (!ok) {
      ++failures;
      std::printf("iteration %lld: lm_loss %.17g vs reference %.17g (relative %.3g)\n",
                  static_cast<long long>(iteration), loss, it->second, relative);
    }
  }
  std::printf("compared iterations %lld..%lld of %s with %s: worst relative difference %.3g (tolerance %g%s)\n",
              static_cast<long long>(run_losses.begin()->first), static_cast<long long>(run_losses.rbegin()->first),
              argv[2], argv[3], worst, tolerance, tolerance == 0 ? ", bitwise" : "");
  TESSERA_CHECK(failures == 0, failures, " iterations differ");
  return 0;
}

int exact(int argc, char** argv) {
  TESSERA_CHECK(argc >= 3, "usage: exact DIR [key=value...]");
  const std::string dir = argv[2];
  std::vector<std::string> layout(argv + 3, argv + argc);
  auto straight = train_to(20, layout);
  std::vector<std::string> save = layout;
  save.push_back("checkpoint.save=" + dir);
  auto first = train_to(10, save);
  std::vector<std::string> load = save;
  load.push_back("checkpoint.load=" + dir);
  auto second = train_to(20, load);
  TESSERA_CHECK(straight.lm_loss.size() == 20 && first.lm_loss.size() == 10 && second.lm_loss.size() == 10,
                "iterations run: ", straight.lm_loss.size(), ", ", first.lm_loss.size(), ", ",
                second.lm_loss.size());
  int failures = 0;
  for (size_t i = 0; i < 20; ++i) {
    const double resumed = i < 10 ? first.lm_loss[i] : second.lm_loss[i - 10];
    const double resumed_norm = i < 10 ? first.grad_norm[i] : second.grad_norm[i - 10];
    if (resumed != straight.lm_loss[i] || resumed_norm != straight.grad_norm[i]) {
      ++failures;
      std::fprintf(stderr, "[rank %d] iteration %zu: lm_loss %.17g (straight %.17g), grad norm %.17g (straight %.17g)\n",
                   Runtime::get().world_rank(), i + 1, resumed, straight.lm_loss[i], resumed_norm,
                   straight.grad_norm[i]);
    }
  }
  TESSERA_CHECK(failures == 0, failures, " of 20 iterations differ between the straight and the resumed run");
  if (Runtime::get().world_rank() == 0)
    std::printf("exact resume: 20 iterations straight == 10 + save + load + 10, bitwise (lm_loss %.17g at 20)\n",
                straight.lm_loss[19]);
  return 0;
}

int corrupt(int argc, char** argv) {
  TESSERA_CHECK(argc == 4, "usage: corrupt FILE DATASET");
  haddr_t offset = HADDR_UNDEF;
  hsize_t bytes = 0;
  {
    hid_t file = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
    TESSERA_CHECK(file >= 0, "cannot open ", argv[2]);
    hid_t dataset = H5Dopen2(file, argv[3], H5P_DEFAULT);
    TESSERA_CHECK(dataset >= 0, "no dataset ", argv[3], " in ", argv[2]);
    offset = H5Dget_offset(dataset);
    bytes = H5Dget_storage_size(dataset);
    H5Dclose(dataset);
    H5Fclose(file);
  }
  TESSERA_CHECK(offset != HADDR_UNDEF && bytes >= 8, "dataset ", argv[3], " has no contiguous raw data");
  std::fstream f(argv[2], std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset + bytes / 2));
  const char garbage[4] = {'\x5a', '\x5a', '\x5a', '\x5a'};
  f.write(garbage, 4);
  TESSERA_CHECK(f.good(), "cannot write to ", argv[2]);
  std::printf("overwrote 4 bytes of %s in %s at byte %llu\n", argv[3], argv[2],
              static_cast<unsigned long long>(offset + bytes / 2));
  return 0;
}

int dispatch(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "run") return run(argc, argv);
  if (mode == "compare") return compare(argc, argv);
  if (mode == "exact") return exact(argc, argv);
  if (mode == "corrupt") return corrupt(argc, argv);
  TESSERA_FAIL("usage: ckpt_trainer_test run|compare|exact|corrupt ...");
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::run_main(argc, argv, tessera::dispatch); }
