#include "tessera/train/memory_report.h"

#include <algorithm>
#include <sstream>

#include "tessera/core/logging.h"
#include "tessera/train/training_setup.h"

namespace tessera::train {

MemoryReport memory_report(const TrainingSetup& x) {
  MemoryReport r;
  const auto& store = x.model->parameters();
  const auto bytes = static_cast<int64_t>(dtype_size(store.dtype()));
  r.parameters = store.numel() * bytes;
  // The store's own gradients, unless they live in the optimizer's f32 reduction buffer.
  if (!store.has_external_grads()) r.gradients = store.numel() * static_cast<int64_t>(dtype_size(store.grad_dtype()));
  if (x.distributed_optimizer) {
    r.gradients += x.distributed_optimizer->grad_buffer().numel() * 4;  // f32 reduction buffer
    r.optimizer_state = static_cast<int64_t>(x.distributed_optimizer->state_bytes());  // fp32 main params, m, v
  } else if (x.adamw) {
    r.optimizer_state = static_cast<int64_t>(x.adamw->state_bytes());
  }
  const auto& t = x.config.training;
  r.activation = x.model->activation_memory(x.config.model.seq_length, t.micro_batch_size);
  // Micro-batches in flight on this stage: 1 without pipelining; 1F1B: pp - stage; interleaved
  // (V chunks): (pp - stage - 1) * 2 + (V - 1) * pp + 1 chunk slots of 1/V of the stage's layers.
  const int64_t pp = x.context->pp_size(), stage = x.context->pp_rank(), V = x.model->num_chunks();
  const int64_t m = x.num_micro_batches;
  int64_t slots = 1;
  if (pp > 1) slots = V == 1 ? std::min(pp - stage, m) : std::min(m * V, (pp - stage - 1) * 2 + (V - 1) * pp + 1);
  r.in_flight = slots;
  r.activations = slots * r.activation.kept_per_micro_batch / V;
  r.activations_none = slots * r.activation.kept_per_micro_batch_none / V;
  r.workspace = r.activation.workspace;
  return r;
}

namespace {
std::string mib(int64_t bytes) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  if (bytes < (1 << 20)) s << static_cast<double>(bytes) / 1024 << " KiB";
  else s << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return s.str();
}
}  // namespace

void log_memory_report(const MemoryReport& r, const std::string& recompute) {
  const auto& a = r.activation;
  log::info(" > memory estimate of this rank: parameters ", mib(r.parameters), ", gradients ", mib(r.gradients),
            ", optimizer state ", mib(r.optimizer_state), ", activations ", mib(r.activations), " (", r.in_flight,
            " micro-batch", r.in_flight == 1 ? "" : "es", " / chunk slots in flight; ", mib(r.activations_none),
            " without recomputation), workspace ", mib(r.workspace), "; total ", mib(r.total()));
  if (a.layers > 0)
    log::info(" > activations per layer and micro-batch: ", mib(a.per_layer_none), " without recomputation, ",
              mib(a.per_layer_selective), " selective, ", mib(a.per_layer_full), " full (the run: ", recompute,
              "); embedding and head ", mib(a.embedding_and_head));
}

std::string memory_report_json(const MemoryReport& r) {
  const auto& a = r.activation;
  auto m = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  std::ostringstream s;
  s.precision(6);
  s << "{\"parameters_mib\": " << m(r.parameters) << ", \"gradients_mib\": " << m(r.gradients)
    << ", \"optimizer_state_mib\": " << m(r.optimizer_state) << ", \"activations_mib\": " << m(r.activations)
    << ", \"activations_without_recompute_mib\": " << m(r.activations_none) << ", \"workspace_mib\": "
    << m(r.workspace) << ", \"total_mib\": " << m(r.total()) << ", \"in_flight\": " << r.in_flight
    << ", \"activation_per_layer_mib\": {\"none\": " << m(a.per_layer_none) << ", \"selective\": "
    << m(a.per_layer_selective) << ", \"full\": " << m(a.per_layer_full) << "}, \"embedding_and_head_mib\": "
    << m(a.embedding_and_head) << "}";
  return s.str();
}

}  // namespace tessera::train
