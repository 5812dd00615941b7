// The run's memory on this rank, estimated at start (printed, and in tessera-bench's JSON):
// parameters, gradients (the model's and the optimizer's fp32 buffer), optimizer state, the
// activations of the micro-batches in flight (with the run's recomputation, and without), and
// workspace. Estimates from the shapes (models::ActivationMemory); the measured device peak is
// printed at the end of training beside it.
#pragma once
#include <string>

#include "tessera/models/stage_model.h"

namespace tessera::train {

struct TrainingSetup;

struct MemoryReport {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  models::ActivationMemory activation;  // one micro-batch
  int64_t in_flight = 1;                // micro-batches (chunk slots / chunks) whose activations live at once
  int64_t activations = 0, activations_none = 0, workspace = 0;
  int64_t total() const { return parameters + gradients + optimizer_state + activations + workspace; }
};

MemoryReport memory_report(const TrainingSetup& setup);
void log_memory_report(const MemoryReport& report, const std::string& recompute);
std::string memory_report_json(const MemoryReport& report);  // a JSON object, bytes as MiB

}  // namespace tessera::train
