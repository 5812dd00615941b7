// Whole-pipeline checks of the per-stage schedules: every message a stage sends is the one its
// peer receives at the same position (MPI matches point-to-point messages in posting order), every
// compute step has its inputs, and blocking batched send/recv cannot deadlock.
#pragma once
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/pipeline/schedule_step.h"

namespace tessera::parallel {

// schedules[r] is stage r's. Returns an empty string when consistent, else what is wrong.
std::string check_pipeline_schedules(const std::vector<StageSchedule>& schedules);

// Builds every stage's schedule (1F1B for num_chunks == 1, else interleaved) and checks them;
// throws Error when the check fails.
void verify_pipeline_schedules(int pp, int num_chunks, int64_t num_micro_batches, bool forward_only,
                               int64_t group_size = 0);

// verify_pipeline_schedules once per shape: the shapes its owner (a run) has verified.
class VerifiedSchedules {
 public:
  void verify(int pp, int num_chunks, int64_t num_micro_batches, bool forward_only, int64_t group_size = 0);

 private:
  std::set<std::tuple<int, int, int64_t, bool, int64_t>> verified_;
};

// The schedule of one stage (1F1B when num_chunks == 1, else interleaved).
StageSchedule build_stage_schedule(int pp, int rank, int num_chunks, int64_t num_micro_batches, bool forward_only,
                                   int64_t group_size = 0);

}  // namespace tessera::parallel
