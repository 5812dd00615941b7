// The steps of a pipeline schedule on one stage: forward or backward of (micro-batch, chunk), and
// batches of point-to-point operations (sent and received activations and their gradients).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel {

enum class P2PKind { send_forward, recv_forward, send_backward, recv_backward };
std::string p2p_kind_name(P2PKind kind);

// chunk is this stage's model chunk: the one whose output (send_forward) or input gradient
// (send_backward) is sent, or the one that will consume the received tensor (recv_*).
struct P2PItem {
  P2PKind kind;
  int chunk = 0;
  int64_t micro_batch = 0;
  bool operator==(const P2PItem&) const = default;
};

struct ScheduleStep {
  enum class Kind { forward, backward, p2p };
  Kind kind;
  int chunk = 0;             // forward / backward
  int64_t micro_batch = 0;   // forward / backward
  std::vector<P2PItem> p2p;  // p2p: posted together (Communicator::batched_p2p), in this order
};

// One stage's schedule for one step, plus what it was built for.
struct StageSchedule {
  int pp_size = 1, pp_rank = 0, num_chunks = 1;
  int64_t num_micro_batches = 1;
  bool forward_only = false;
  std::vector<ScheduleStep> steps;
};

// Readable one-line form of a step ("F(3,c1)", "B(0,c0)", "{send_fwd(3,c1) recv_bwd(0,c0)}").
std::string describe_step(const ScheduleStep& step);

// Stage `rank` of `pp` holds chunk c as virtual stage c*pp + rank; the pipeline's first (last)
// stage is chunk 0 on rank 0 (chunk V-1 on rank pp-1).
inline bool is_first_virtual_stage(int rank, int chunk) { return rank == 0 && chunk == 0; }
inline bool is_last_virtual_stage(int pp, int rank, int chunks, int chunk) {
  return rank == pp - 1 && chunk == chunks - 1;
}

}  // namespace tessera::parallel
