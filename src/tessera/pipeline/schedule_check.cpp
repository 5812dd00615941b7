#include "tessera/pipeline/schedule_check.h"

#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/pipeline/schedule_1f1b.h"
#include "tessera/pipeline/schedule_interleaved.h"

namespace tessera::parallel {

namespace {

// A message as both ends see it: activation or gradient, the receiving stage's chunk, micro-batch.
struct Message {
  bool gradient;
  int chunk;
  int64_t micro_batch;
  bool operator==(const Message&) const = default;
};

struct Endpoint {
  bool is_send;
  int peer;
  Message message;
};

Endpoint endpoint(const StageSchedule& s, const P2PItem& item) {
  const int pp = s.pp_size, r = s.pp_rank;
  const int next = (r + 1) % pp, prev = (r - 1 + pp) % pp;
  switch (item.kind) {
    case P2PKind::send_forward: return {true, next, {false, r == pp - 1 ? item.chunk + 1 : item.chunk, item.micro_batch}};
    case P2PKind::recv_forward: return {false, prev, {false, item.chunk, item.micro_batch}};
    case P2PKind::send_backward: return {true, prev, {true, r == 0 ? item.chunk - 1 : item.chunk, item.micro_batch}};
    case P2PKind::recv_backward: return {false, next, {true, item.chunk, item.micro_batch}};
  }
  return {};
}

std::string check_stage_inputs(const StageSchedule& s) {
  std::set<std::tuple<bool, int, int64_t>> received, sent;
  std::set<std::pair<int, int64_t>> forwarded, backwarded;
  std::ostringstream err;
  for (const auto& step : s.steps) {
    auto key = std::make_pair(step.chunk, step.micro_batch);
    if (step.kind == ScheduleStep::Kind::forward) {
      if (!is_first_virtual_stage(s.pp_rank, step.chunk) && !received.count({false, step.chunk, step.micro_batch}))
        err << "stage " << s.pp_rank << ": " << describe_step(step) << " before its activation arrived; ";
      if (!forwarded.insert(key).second) err << "stage " << s.pp_rank << ": " << describe_step(step) << " twice; ";
    } else if (step.kind == ScheduleStep::Kind::backward) {
      if (!forwarded.count(key)) err << "stage " << s.pp_rank << ": " << describe_step(step) << " before its forward; ";
      if (!is_last_virtual_stage(s.pp_size, s.pp_rank, s.num_chunks, step.chunk) &&
          !received.count({true, step.chunk, step.micro_batch}))
        err << "stage " << s.pp_rank << ": " << describe_step(step) << " before its gradient arrived; ";
      if (!backwarded.insert(key).second) err << "stage " << s.pp_rank << ": " << describe_step(step) << " twice; ";
    } else {
      for (const auto& item : step.p2p) {
        auto k = std::make_pair(item.chunk, item.micro_batch);
        bool ok = item.kind == P2PKind::send_forward ? forwarded.count(k) > 0
                  : item.kind == P2PKind::send_backward ? backwarded.count(k) > 0
                                                          : true;
        if (!ok) err << "stage " << s.pp_rank << ": " << describe_step(step) << " sends before computing; ";
        if (item.kind == P2PKind::recv_forward) received.insert({false, item.chunk, item.micro_batch});
        if (item.kind == P2PKind::recv_backward) received.insert({true, item.chunk, item.micro_batch});
      }
    }
  }
  size_t expected = static_cast<size_t>(s.num_micro_batches * s.num_chunks);
  if (forwarded.size() != expected) err << "stage " << s.pp_rank << ": " << forwarded.size() << " forwards, expected " << expected << "; ";
  if (backwarded.size() != (s.forward_only ? 0 : expected))
    err << "stage " << s.pp_rank << ": " << backwarded.size() << " backwards; ";
  return err.str();
}

// MPI matches messages between two ranks in posting order: the k-th send of A to B must be the
// message B expects in its k-th receive from A.
std::string check_message_order(const std::vector<StageSchedule>& schedules) {
  const int pp = static_cast<int>(schedules.size());
  std::map<std::pair<int, int>, std::vector<Message>> sends, recvs;  // (from, to)
  for (const auto& s : schedules)
    for (const auto& step : s.steps)
      for (const auto& item : step.p2p) {
        Endpoint e = endpoint(s, item);
        if (e.is_send) sends[{s.pp_rank, e.peer}].push_back(e.message);
        else recvs[{e.peer, s.pp_rank}].push_back(e.message);
      }
  std::ostringstream err;
  for (int a = 0; a < pp; ++a)
    for (int b = 0; b < pp; ++b) {
      const auto& sv = sends[{a, b}];
      const auto& rv = recvs[{a, b}];
      if (sv.size() != rv.size()) {
        err << "stage " << a << " sends " << sv.size() << " messages to stage " << b << ", which receives " << rv.size()
            << "; ";
        continue;
      }
      for (size_t i = 0; i < sv.size(); ++i)
        if (!(sv[i] == rv[i])) {
          err << "message " << i << " from stage " << a << " to " << b << " is (" << (sv[i].gradient ? "grad" : "act")
              << ", c" << sv[i].chunk << ", mb " << sv[i].micro_batch << ") but is received as ("
              << (rv[i].gradient ? "grad" : "act") << ", c" << rv[i].chunk << ", mb " << rv[i].micro_batch << "); ";
          break;
        }
    }
  return err.str();
}

// Every batch blocks until each of its operations is matched (rendezvous, as NCCL or large MPI
// messages): simulate all stages and report a state where none can advance.
std::string check_deadlock_free(const std::vector<StageSchedule>& schedules) {
  const int pp = static_cast<int>(schedules.size());
  std::vector<size_t> pc(static_cast<size_t>(pp), 0);
  std::vector<bool> posted(static_cast<size_t>(pp), false);
  std::map<std::pair<int, int>, int64_t> sends_posted, recvs_posted;  // (from, to)
  std::vector<std::vector<std::pair<Endpoint, int64_t>>> current(static_cast<size_t>(pp));
  while (true) {
    bool progress = false, done = true;
    for (int r = 0; r < pp; ++r) {
      const auto& steps = schedules[static_cast<size_t>(r)].steps;
      size_t& i = pc[static_cast<size_t>(r)];
      while (i < steps.size() && steps[i].kind != ScheduleStep::Kind::p2p) { ++i; progress = true; }
      if (i == steps.size()) continue;
      done = false;
      auto& cur = current[static_cast<size_t>(r)];
      if (!posted[static_cast<size_t>(r)]) {
        cur.clear();
        for (const auto& item : steps[i].p2p) {
          Endpoint e = endpoint(schedules[static_cast<size_t>(r)], item);
          int64_t& n = e.is_send ? sends_posted[{r, e.peer}] : recvs_posted[{e.peer, r}];
          cur.push_back({e, n++});
        }
        posted[static_cast<size_t>(r)] = true;
        progress = true;
      }
      bool matched = true;
      for (const auto& [e, index] : cur)
        matched &= e.is_send ? recvs_posted[{r, e.peer}] > index : sends_posted[{e.peer, r}] > index;
      if (matched) {
        ++i;
        posted[static_cast<size_t>(r)] = false;
        progress = true;
      }
    }
    if (done) return "";
    if (!progress) {
      std::ostringstream err;
      err << "deadlock: ";
      for (int r = 0; r < pp; ++r) {
        size_t i = pc[static_cast<size_t>(r)];
        const auto& steps = schedules[static_cast<size_t>(r)].steps;
        err << "stage " << r << " waits in " << (i < steps.size() ? describe_step(steps[i]) : "(done)") << "; ";
      }
      return err.str();
    }
  }
}

}  // namespace

std::string check_pipeline_schedules(const std::vector<StageSchedule>& schedules) {
  std::string err;
  for (const auto& s : schedules) err += check_stage_inputs(s);
  if (!err.empty()) return err;
  err = check_message_order(schedules);
  if (!err.empty()) return err;
  return check_deadlock_free(schedules);
}

StageSchedule build_stage_schedule(int pp, int rank, int num_chunks, int64_t m, bool forward_only, int64_t group) {
  if (num_chunks == 1) return build_1f1b_schedule(pp, rank, m, forward_only);
  return build_interleaved_schedule(pp, rank, num_chunks, m, forward_only, group);
}

void VerifiedSchedules::verify(int pp, int num_chunks, int64_t m, bool forward_only, int64_t group) {
  auto key = std::make_tuple(pp, num_chunks, m, forward_only, group);
  if (verified_.count(key)) return;
  verify_pipeline_schedules(pp, num_chunks, m, forward_only, group);
  verified_.insert(key);
}

void verify_pipeline_schedules(int pp, int num_chunks, int64_t m, bool forward_only, int64_t group) {
  std::vector<StageSchedule> all;
  for (int r = 0; r < pp; ++r) all.push_back(build_stage_schedule(pp, r, num_chunks, m, forward_only, group));
  std::string err = check_pipeline_schedules(all);
  TESSERA_CHECK(err.empty(), "pipeline schedule (pp ", pp, ", chunks ", num_chunks, ", micro-batches ", m,
                forward_only ? ", forward only" : "", ") is inconsistent: ", err);
}

}  // namespace tessera::parallel
