#include "tessera/train/training_setup.h"

#include "tessera/core/logging.h"
#include "tessera/models/model_registry.h"
#include "tessera/models/vocab.h"
#include "tessera/ops/deterministic_mode.h"
#include "tessera/pipeline/pipeline_layout.h"
#include "tessera/pipeline/pipeline_training.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/tp_report.h"
#include "tessera/train/training_optimizer.h"

namespace tessera::train {

namespace {
void log_start(const TrainingSetup& x) {
  const auto& p = x.config.parallel;
  log::info("------------------------ arguments ------------------------");
  log::info(x.config.to_toml());
  log::info("-------------------- end of arguments ---------------------");
  log::info("using world size: ", x.context->grid().world_size(), ", data-parallel size: ", x.context->dp_size(),
            ", tensor-model-parallel size: ", p.tensor_model_parallel_size,
            ", pipeline-model-parallel size: ", p.pipeline_model_parallel_size, ", device: ", x.device.name());
  log::info("data: ", x.data.description);
  models::log_padded_vocab(x.data.vocab_size, x.model->padded_vocab_size());
  parallel::log_parameters_per_model_parallel_rank(*x.context, x.model->parameters());
  log::info(" > FLOPs per iteration: ", x.flops_per_iteration, " (convention: 6N + 12*L*h*s per token, ",
            "N = parameters without position embeddings",
            x.config.model.num_experts > 0 ? "; MoE: the active parameters, moe_router_topk experts per MoE layer)" : ")");
  std::string recompute = p.recompute_granularity;
  if (recompute == "full") recompute += " " + p.recompute_method + " " + std::to_string(p.recompute_num_layers);
  log_memory_report(x.memory, recompute);
}

}  // namespace

nn::RecomputeConfig recompute_config(const Config& config, int pp) {
  const auto& p = config.parallel;
  nn::RecomputeConfig recompute =
      nn::parse_recompute_config(p.recompute_granularity, p.recompute_method, p.recompute_num_layers);
  // Every stage's chunks, so that every rank rejects the same config.
  for (int stage = 0; stage < pp; ++stage) {
    const auto chunks = parallel::pipeline_chunk_layouts(config.model.num_layers, p, pp, stage);
    for (size_t c = 0; c < chunks.size(); ++c)
      nn::check_recompute_layers(recompute, chunks[c].num_layers,
                                 "pipeline stage " + std::to_string(stage) + " model chunk " + std::to_string(c) +
                                     " (model.num_layers = " + std::to_string(config.model.num_layers) +
                                     ", parallel.pipeline_model_parallel_size = " + std::to_string(pp) + ")");
  }
  return recompute;
}

ckpt::TrainerOptimizer TrainingSetup::checkpointed_optimizer() const {
  return {adamw.get(), distributed_optimizer.get(),
          distributed_optimizer && config.parallel.use_distributed_optimizer && context->dp_size() > 1};
}

std::unique_ptr<TrainingSetup> build_training_setup(const Config& config, Device device) {
  auto setup = std::make_unique<TrainingSetup>();
  TrainingSetup& x = *setup;
  x.config = config;
  x.device = device;
  resolve_default_precision(x.config, x.device.is_cuda());
  ops::set_deterministic_mode(x.config.training.deterministic_mode);  // before any CUDA op runs

  const auto& t = x.config.training;
  Runtime& runtime = Runtime::init(nullptr, nullptr);
  validate_for_world(x.config, runtime.world_size());
  x.context = std::make_unique<parallel::ParallelContext>(x.config.parallel, runtime.world_size(), runtime.world_rank(),
                                                         x.device);
  x.num_micro_batches = t.global_batch_size / (t.micro_batch_size * x.context->dp_size());
  x.data = build_training_data(x.config);

  x.tp = parallel::tensor_parallel_view(*x.context);
  models::ModelBuildArgs build;
  build.config = &x.config.model;
  build.vocab_size = x.data.vocab_size;
  build.dtype = optim::model_param_dtype(t.precision);
  build.device = x.device;
  build.tp = x.tp;
  if (x.context->grid().expert_model_size() > 1)
    build.ep = {&x.context->group(GroupKind::expert_model), x.context->grid().expert_model_size(),
                x.context->grid().expert_model_rank()};
  build.pipeline_size = x.context->pp_size();
  build.chunks = parallel::pipeline_chunk_layouts(x.config.model.num_layers, x.config.parallel, x.context->pp_size(),
                                                  x.context->pp_rank());
  build.recompute = recompute_config(x.config, x.context->pp_size());
  x.model = models::model_family(x.config.model.architecture).build(build);
  x.model->set_loss(models::loss_registration(x.config.training.loss).build(x.config.training.loss_params));
  x.model->initialize(static_cast<uint64_t>(t.seed));  // bf16 / fp16: the fp32 initialisation rounded once
  parallel::setup_pipeline_training(*x.model, *x.context, x.num_micro_batches);

  x.distributed_optimizer = make_training_optimizer(x.config, x.model->parameters(), *x.context);
  std::vector<optim::ParamEntry> entries;
  for (const auto& p : x.model->parameters().parameters())
    entries.push_back({p.name, p.value, p.grad, p.weight_decay});  // set at registration
  if (!x.distributed_optimizer) x.adamw = std::make_unique<optim::AdamWOptimizer>(std::move(entries));

  const auto& o = x.config.optimizer;
  optim::LrScheduleConfig lr;
  lr.style = o.lr_decay_style;
  lr.lr = o.lr;
  lr.min_lr = o.min_lr;
  lr.warmup_iters = o.lr_warmup_iters;
  lr.decay_iters = o.lr_decay_iters;
  lr.wsd_decay_iters = o.lr_wsd_decay_iters;
  lr.wsd_decay_style = o.lr_wsd_decay_style;
  x.schedule = std::make_unique<optim::LrSchedule>(lr);

  int64_t s = x.config.model.seq_length;
  // FLOPs per token: 6N + 12 L h s (N = parameters excluding position embeddings; the tied word
  // embedding counts once, as the output layer's GEMM).
  // MoE: N counts the active parameters (each token's top-k experts, not all of them).
  double per_token = models::flops_per_token(
      x.config.model, parallel::pipeline_flops_parameter_count(x.model->parameters(), *x.context) +
                          models::moe_active_expert_parameters(x.config.model));
  x.flops_per_iteration = per_token * static_cast<double>(t.global_batch_size * s);
  x.memory = memory_report(x);
  log_start(x);
  x.checkpoints = std::make_unique<ckpt::TrainingCheckpoints>(x.config, *x.context);
  x.resume = x.checkpoints->load(*x.model, x.checkpointed_optimizer());
  x.config.training.seed = x.resume.seed;  // dropout streams follow the checkpoint's seed unless no_load_rng
  return setup;
}

}  // namespace tessera::train
