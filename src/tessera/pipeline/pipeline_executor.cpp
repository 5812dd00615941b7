#include "tessera/pipeline/pipeline_executor.h"

#include <algorithm>
#include <map>
#include <set>

#include "tessera/core/error.h"
#include "tessera/pipeline/schedule_check.h"

namespace tessera::parallel {

Arena* PipelineArenaPool::acquire(Device device) {
  if (free_.empty()) {
    arenas_.push_back(std::make_unique<Arena>(block_bytes_, device));
    return arenas_.back().get();
  }
  Arena* arena = free_.back();
  free_.pop_back();
  TESSERA_CHECK(arena->device() == device, "pipeline arena pool: arena on ", arena->device().name(), ", asked for ",
                device.name());
  return arena;
}

void PipelineArenaPool::release(Arena* arena) {
  arena->reset();
  free_.push_back(arena);
}

namespace {

// Everything of one (micro-batch, chunk) on this stage, from its input's arrival to its backward
// (or, forward-only, to its output's send).
struct Slot {
  Arena* arena = nullptr;
  std::unique_ptr<models::MicroBatchInputs> inputs;
  models::StageTensors input;    // received activations (chunks without the embedding)
  models::StageTensors output;   // to send to the next stage; dropped once sent
  models::StageTensors doutput;  // received gradients of the output
  models::StageTensors dinput;   // gradients of the input, to send to the previous stage
  std::unique_ptr<models::ChunkActivations> acts;
  models::LossSum loss;
};

class StageExecutor {
 public:
  StageExecutor(const ForwardBackwardArgs& args, PipelineArenaPool& pool)
      : args_(args), model_(*args.model), comm_(args.context->pipeline()), pool_(pool) {
    const int pp = args.context->pp_size(), rank = args.context->pp_rank();
    TESSERA_CHECK(comm_.size() == pp && comm_.rank() == rank, "pipeline group of size ", comm_.size(), " rank ",
                  comm_.rank(), " does not match the grid (pp ", pp, ", stage ", rank, ")");
    next_ = (rank + 1) % pp;
    prev_ = (rank - 1 + pp) % pp;
    const int V = model_.num_chunks();
    for (int c = 0; c < V; ++c) {
      const auto& layout = model_.chunk_layout(c);
      TESSERA_CHECK(layout.has_embedding == is_first_virtual_stage(rank, c) &&
                        layout.has_head == is_last_virtual_stage(pp, rank, V, c),
                    "stage ", rank, " chunk ", c, ": the embedding must be on chunk 0 of stage 0 and the head on "
                    "chunk ", V - 1, " of stage ", pp - 1, " (see parallel::pipeline_chunk_layouts)");
    }
    stage_shapes_ = model_.stage_shapes(args.seq_length, args.micro_batch_size);
  }

  ForwardBackwardResult run(const StageSchedule& schedule) {
    for (const auto& step : schedule.steps) {
      switch (step.kind) {
        case ScheduleStep::Kind::forward: forward(step.chunk, step.micro_batch); break;
        case ScheduleStep::Kind::backward: backward(step.chunk, step.micro_batch); break;
        case ScheduleStep::Kind::p2p: exchange(step.p2p); break;
      }
      if (args_.on_step) args_.on_step(step);
    }
    TESSERA_CHECK(slots_.empty(), "pipeline stage ", args_.context->pp_rank(), " ended the step with ", slots_.size(),
                  " (micro-batch, chunk) slots still live");
    result_.activation_arenas = pool_.size();
    return result_;
  }

 private:
  using Key = std::pair<int64_t, int>;  // (micro-batch, chunk)

  Slot& slot(int64_t mb, int chunk) {
    Slot& s = slots_[{mb, chunk}];
    if (!s.arena) s.arena = pool_.acquire(model_.parameters().device());
    return s;
  }
  Slot& existing(int64_t mb, int chunk, const char* what) {
    auto it = slots_.find({mb, chunk});
    TESSERA_CHECK(it != slots_.end(), "pipeline stage ", args_.context->pp_rank(), ": ", what, " of micro-batch ", mb,
                  " chunk ", chunk, " without its forward");
    return it->second;
  }
  void release(int64_t mb, int chunk) {
    auto it = slots_.find({mb, chunk});
    pool_.release(it->second.arena);
    slots_.erase(it);
  }
  void record_memory() {
    size_t bytes = 0;
    for (const auto& [key, s] : slots_) bytes += s.arena->used_bytes();
    result_.peak_activation_bytes = std::max(result_.peak_activation_bytes, bytes);
    std::set<int64_t> in_flight;
    for (const auto& key : stashed_) in_flight.insert(key.first);
    result_.peak_in_flight_micro_batches =
        std::max(result_.peak_in_flight_micro_batches, static_cast<int64_t>(in_flight.size()));
  }

  void forward(int chunk, int64_t mb) {
    Slot& s = slot(mb, chunk);
    s.inputs = model_.prepare_micro_batch(*s.arena, args_.load_micro_batch(mb));
    s.acts = model_.make_activations();
    const bool head = model_.chunk_layout(chunk).has_head;
    nn::DropoutContext dropout = args_.dropout(mb);
    models::StageTensors y = model_.forward_stage(chunk, *s.arena, *s.inputs, s.input, dropout, *s.acts);
    if (head) {
      if (args_.on_logits) args_.on_logits(mb, model_.stage_logits(*s.arena, *s.inputs, *s.acts, y));
      s.loss = model_.stage_loss(*s.arena, *s.inputs, *s.acts,
                                 args_.forward_only ? std::nullopt : std::optional<double>(args_.grad_scale));
      models::accumulate(result_.loss, s.loss);
      ++result_.micro_batches;
    } else {
      s.output = y;
    }
    if (!args_.forward_only) stashed_.insert({mb, chunk});
    record_memory();
    if (args_.forward_only && head) release(mb, chunk);
  }

  void backward(int chunk, int64_t mb) {
    TESSERA_CHECK(!args_.forward_only, "backward step in a forward-only schedule");
    Slot& s = existing(mb, chunk, "backward");
    const auto& layout = model_.chunk_layout(chunk);
    TESSERA_CHECK(layout.has_head || !s.doutput.empty(), "pipeline stage ", args_.context->pp_rank(),
                  ": backward of micro-batch ", mb, " chunk ", chunk, " before its output gradient arrived");
    nn::DropoutContext dropout = args_.dropout(mb);
    s.dinput = model_.backward_stage(chunk, *s.arena, *s.inputs, s.doutput, args_.grad_scale, dropout,
                                     *s.acts);
    record_memory();
    stashed_.erase({mb, chunk});
    if (layout.has_embedding) release(mb, chunk);  // nothing to send back
  }

  void exchange(const std::vector<P2PItem>& items) {
    const DType dtype = model_.stage_dtype();
    std::vector<P2POp> ops;
    for (const auto& item : items) {
      switch (item.kind) {
        case P2PKind::send_forward: {
          Slot& s = existing(item.micro_batch, item.chunk, "send_forward");
          TESSERA_CHECK(!s.output.empty(), "send_forward of micro-batch ", item.micro_batch, " without output");
          for (const Tensor& t : s.output) ops.push_back(P2POp::send(t, next_));
          break;
        }
        case P2PKind::recv_forward: {
          Slot& s = slot(item.micro_batch, item.chunk);
          s.input.clear();
          for (const Shape& shape : stage_shapes_) s.input.push_back(s.arena->allocate(dtype, shape));
          for (const Tensor& t : s.input) ops.push_back(P2POp::recv(t, prev_));
          break;
        }
        case P2PKind::send_backward: {
          Slot& s = existing(item.micro_batch, item.chunk, "send_backward");
          for (const Tensor& t : s.dinput) ops.push_back(P2POp::send(t, prev_));
          break;
        }
        case P2PKind::recv_backward: {
          Slot& s = existing(item.micro_batch, item.chunk, "recv_backward");
          s.doutput.clear();
          for (const Shape& shape : stage_shapes_) s.doutput.push_back(s.arena->allocate(dtype, shape));
          for (const Tensor& t : s.doutput) ops.push_back(P2POp::recv(t, next_));
          break;
        }
      }
    }
    comm_.batched_p2p(ops);
    for (const auto& item : items) {
      if (item.kind == P2PKind::send_forward) {
        slots_.at({item.micro_batch, item.chunk}).output.clear();  // sent: the stage no longer needs it
        if (args_.forward_only) release(item.micro_batch, item.chunk);
      } else if (item.kind == P2PKind::send_backward) {
        release(item.micro_batch, item.chunk);
      }
    }
    record_memory();
  }

  const ForwardBackwardArgs& args_;
  models::StageModel& model_;
  Communicator& comm_;
  PipelineArenaPool& pool_;
  int next_ = 0, prev_ = 0;
  std::vector<Shape> stage_shapes_;  // what one (micro-batch, chunk) sends and receives
  std::map<Key, Slot> slots_;
  std::set<Key> stashed_;  // forward run, backward not yet
  ForwardBackwardResult result_;
};

}  // namespace

ForwardBackwardResult forward_backward_pipelining(const ForwardBackwardArgs& args, PipelineState& state) {
  TESSERA_CHECK(args.model && args.context && args.context->pp_size() > 1,
                "forward_backward_pipelining needs a model and a pipeline-parallel context");
  const int pp = args.context->pp_size(), rank = args.context->pp_rank(), V = args.model->num_chunks();
  StageSchedule schedule = build_stage_schedule(pp, rank, V, args.num_micro_batches, args.forward_only);
  state.schedules.verify(pp, V, args.num_micro_batches, args.forward_only);
  StageExecutor executor(args, state.arenas);
  return executor.run(schedule);
}

}  // namespace tessera::parallel
