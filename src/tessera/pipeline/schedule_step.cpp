#include "tessera/pipeline/schedule_step.h"

namespace tessera::parallel {

std::string p2p_kind_name(P2PKind kind) {
  switch (kind) {
    case P2PKind::send_forward: return "send_fwd";
    case P2PKind::recv_forward: return "recv_fwd";
    case P2PKind::send_backward: return "send_bwd";
    case P2PKind::recv_backward: return "recv_bwd";
  }
  return "?";
}

std::string describe_step(const ScheduleStep& step) {
  auto id = [](int64_t mb, int c) { return "(" + std::to_string(mb) + ",c" + std::to_string(c) + ")"; };
  switch (step.kind) {
    case ScheduleStep::Kind::forward: return "F" + id(step.micro_batch, step.chunk);
    case ScheduleStep::Kind::backward: return "B" + id(step.micro_batch, step.chunk);
    case ScheduleStep::Kind::p2p: {
      std::string out = "{";
      for (size_t i = 0; i < step.p2p.size(); ++i)
        out += (i ? " " : "") + p2p_kind_name(step.p2p[i].kind) + id(step.p2p[i].micro_batch, step.p2p[i].chunk);
      return out + "}";
    }
  }
  return "?";
}

}  // namespace tessera::parallel
