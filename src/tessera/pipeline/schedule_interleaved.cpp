#include "tessera/pipeline/schedule_interleaved.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::parallel {

std::vector<VirtualMicroBatch> interleaved_table(int64_t m, int chunks, int64_t group) {
  std::vector<VirtualMicroBatch> table;
  table.reserve(static_cast<size_t>(m * chunks));
  for (int64_t start = 0; start < m; start += group) {
    int64_t end = std::min(start + group, m);
    for (int c = 0; c < chunks; ++c)
      for (int64_t mb = start; mb < end; ++mb) table.push_back({mb, c});
  }
  return table;
}

void check_interleaved_micro_batches(int pp, int64_t m, int64_t group) {
  if (group < pp || group > m || (m % group != 0 && m % group < pp))
    TESSERA_CONFIG_FAIL("the interleaved pipeline schedule (parallel.num_layers_per_virtual_pipeline_stage > 0) with "
                        "parallel.pipeline_model_parallel_size = ", pp, " needs micro-batches per step m >= ", group,
                        " with m % ", group, " == 0 or m % ", group, " >= ", pp, " (Megatron's constraint); m = ", m,
                        " (training.global_batch_size / (training.micro_batch_size x data-parallel size)). Choose "
                        "training.global_batch_size so that m is a multiple of ", group);
}

int64_t interleaved_warmup(int pp, int rank, int chunks, int64_t m, int64_t group, bool forward_only) {
  int64_t total = m * chunks;
  if (forward_only) return total;
  return std::min<int64_t>(total, 2 * (pp - rank - 1) + (chunks - 1) * group);
}

StageSchedule build_interleaved_schedule(int pp, int rank, int V, int64_t m, bool forward_only, int64_t group) {
  if (group <= 0) group = pp;
  TESSERA_CHECK(pp >= 1 && rank >= 0 && rank < pp && V >= 1, "interleaved schedule: pp ", pp, ", rank ", rank,
                ", chunks ", V);
  check_interleaved_micro_batches(pp, m, group);
  StageSchedule s;
  s.pp_size = pp;
  s.pp_rank = rank;
  s.num_chunks = V;
  s.num_micro_batches = m;
  s.forward_only = forward_only;

  const std::vector<VirtualMicroBatch> table = interleaved_table(m, V, group);
  const int64_t total = m * V;
  auto wrap = [&](int64_t k) { return ((k % total) + total) % total; };  // Python's k % total
  auto fwd_chunk = [&](int64_t k) { return table[static_cast<size_t>(wrap(k))].chunk; };
  auto bwd_chunk = [&](int64_t k) { return V - 1 - table[static_cast<size_t>(wrap(k))].chunk; };
  auto mb_of = [&](int64_t k) { return table[static_cast<size_t>(k)].micro_batch; };
  const bool first_rank = rank == 0, last_rank = rank == pp - 1;

  // The n-th tensor a chunk receives (activation or gradient) belongs to its n-th micro-batch:
  // every chunk runs its forwards and its backwards in micro-batch order.
  std::vector<int64_t> recv_fwd_count(static_cast<size_t>(V), 0), recv_bwd_count(static_cast<size_t>(V), 0);
  auto recv_fwd = [&](int c) { return P2PItem{P2PKind::recv_forward, c, recv_fwd_count[static_cast<size_t>(c)]++}; };
  auto recv_bwd = [&](int c) { return P2PItem{P2PKind::recv_backward, c, recv_bwd_count[static_cast<size_t>(c)]++}; };
  auto compute = [&](ScheduleStep::Kind kind, int c, int64_t mb) { s.steps.push_back({kind, c, mb, {}}); };
  auto p2p = [&](std::vector<P2PItem> items) {
    if (items.empty()) return;
    std::stable_sort(items.begin(), items.end(), [](const P2PItem& a, const P2PItem& b) { return a.kind < b.kind; });
    s.steps.push_back({ScheduleStep::Kind::p2p, 0, 0, std::move(items)});
  };
  // The forward of virtual micro-batch k; returns its send (if its output leaves the stage).
  auto forward = [&](int64_t k, std::vector<P2PItem>& batch) {
    int c = fwd_chunk(k);
    compute(ScheduleStep::Kind::forward, c, mb_of(k));
    if (!is_last_virtual_stage(pp, rank, V, c)) batch.push_back({P2PKind::send_forward, c, mb_of(k)});
  };
  auto backward = [&](int64_t k, std::vector<P2PItem>& batch) {
    int c = bwd_chunk(k);
    compute(ScheduleStep::Kind::backward, c, mb_of(k));
    if (!is_first_virtual_stage(rank, c)) batch.push_back({P2PKind::send_backward, c, mb_of(k)});
  };

  const int64_t warmup = interleaved_warmup(pp, rank, V, m, group, forward_only);
  const int64_t remaining = total - warmup;

  if (!first_rank) p2p({recv_fwd(0)});
  for (int64_t k = 0; k < warmup; ++k) {
    std::vector<P2PItem> batch;
    forward(k, batch);
    int next_c = k + 1 < total ? fwd_chunk(k + 1) : 0;
    bool recv_prev = !(first_rank && next_c == 0) && k != total - 1;
    if (recv_prev) batch.push_back(recv_fwd(next_c));
    if (k == warmup - 1 && !forward_only && remaining > 0 && !last_rank) batch.push_back(recv_bwd(V - 1));
    p2p(std::move(batch));
  }
  for (int64_t k = 0; k < remaining; ++k) {
    int64_t fk = k + warmup;
    std::vector<P2PItem> batch;
    forward(fk, batch);
    backward(k, batch);
    bool recv_prev = true;
    int next_fwd_c;
    if (first_rank) {  // receives from the last stage, which is pp - 1 forwards behind
      next_fwd_c = fwd_chunk(fk - (pp - 1));
      if (next_fwd_c == V - 1) recv_prev = false;
      next_fwd_c += 1;
    } else {
      next_fwd_c = fwd_chunk(fk + 1);
    }
    bool recv_next = true;
    int next_bwd_c;
    if (last_rank) {  // receives from the first stage, which is pp - 1 backwards behind
      next_bwd_c = bwd_chunk(k - (pp - 1));
      if (next_bwd_c == 0) recv_next = false;
      next_bwd_c -= 1;
    } else {
      next_bwd_c = bwd_chunk(k + 1);
    }
    if (k == remaining - 1) recv_prev = false;
    if (recv_prev) batch.push_back(recv_fwd(next_fwd_c));
    if (recv_next) batch.push_back(recv_bwd(next_bwd_c));
    p2p(std::move(batch));
  }
  if (forward_only) return s;
  if (remaining == 0 && !last_rank) p2p({recv_bwd(V - 1)});
  for (int64_t k = remaining; k < total; ++k) {
    std::vector<P2PItem> batch;
    backward(k, batch);
    int next_c = k + 1 < total ? bwd_chunk(k + 1) : 0;
    bool recv_next = !(last_rank && next_c == V - 1) && k != total - 1;
    if (recv_next) batch.push_back(recv_bwd(next_c));
    p2p(std::move(batch));
  }
  return s;
}

}  // namespace tessera::parallel
