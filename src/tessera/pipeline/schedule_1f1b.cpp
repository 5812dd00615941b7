#include "tessera/pipeline/schedule_1f1b.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::parallel {

StageSchedule build_1f1b_schedule(int pp, int rank, int64_t m, bool forward_only) {
  TESSERA_CHECK(pp >= 1 && rank >= 0 && rank < pp && m >= 1, "1F1B schedule: pp ", pp, ", rank ", rank,
                ", micro-batches ", m);
  StageSchedule s;
  s.pp_size = pp;
  s.pp_rank = rank;
  s.num_chunks = 1;
  s.num_micro_batches = m;
  s.forward_only = forward_only;
  const bool first = rank == 0, last = rank == pp - 1;
  auto forward = [&](int64_t mb) { s.steps.push_back({ScheduleStep::Kind::forward, 0, mb, {}}); };
  auto backward = [&](int64_t mb) { s.steps.push_back({ScheduleStep::Kind::backward, 0, mb, {}}); };
  auto p2p = [&](std::vector<P2PItem> items) {
    if (items.empty()) return;
    // One order for every batch (sends and receives of activations, then of gradients), so that
    // two stages exchanging both kinds post them in the same order.
    std::stable_sort(items.begin(), items.end(), [](const P2PItem& a, const P2PItem& b) { return a.kind < b.kind; });
    s.steps.push_back({ScheduleStep::Kind::p2p, 0, 0, std::move(items)});
  };
  auto recv_fwd = [&](int64_t mb) { return first ? std::vector<P2PItem>{} : std::vector<P2PItem>{{P2PKind::recv_forward, 0, mb}}; };
  auto send_fwd = [&](int64_t mb) { return last ? std::vector<P2PItem>{} : std::vector<P2PItem>{{P2PKind::send_forward, 0, mb}}; };
  auto recv_bwd = [&](int64_t mb) { return last ? std::vector<P2PItem>{} : std::vector<P2PItem>{{P2PKind::recv_backward, 0, mb}}; };
  auto send_bwd = [&](int64_t mb) { return first ? std::vector<P2PItem>{} : std::vector<P2PItem>{{P2PKind::send_backward, 0, mb}}; };
  auto join = [](std::vector<P2PItem> a, const std::vector<P2PItem>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };

  const int64_t warmup = forward_only ? m : std::min<int64_t>(pp - rank - 1, m);
  const int64_t remaining = m - warmup;
  for (int64_t i = 0; i < warmup; ++i) {
    p2p(recv_fwd(i));
    forward(i);
    p2p(send_fwd(i));
  }
  if (remaining > 0) p2p(recv_fwd(warmup));
  for (int64_t i = 0; i < remaining; ++i) {
    int64_t fwd = warmup + i;
    forward(fwd);
    p2p(join(send_fwd(fwd), recv_bwd(i)));  // send_forward_recv_backward
    backward(i);
    if (i == remaining - 1) p2p(send_bwd(i));
    else p2p(join(send_bwd(i), recv_fwd(fwd + 1)));  // send_backward_recv_forward
  }
  for (int64_t i = remaining; i < m && !forward_only; ++i) {
    p2p(recv_bwd(i));
    backward(i);
    p2p(send_bwd(i));
  }
  return s;
}

}  // namespace tessera::parallel
