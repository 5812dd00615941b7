#include "tessera/generate/beam_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"

namespace tessera::generate {

BeamSearch::BeamSearch(int64_t num_beams, double length_penalty, int64_t stop_token)
    : num_beams_(num_beams),
      length_penalty_(length_penalty),
      stop_token_(stop_token),
      scores_(static_cast<size_t>(num_beams), -1e9),
      tokens_(static_cast<size_t>(num_beams)),
      logprobs_(static_cast<size_t>(num_beams)) {
  TESSERA_CHECK(num_beams >= 1, "num_beams must be >= 1, got ", num_beams);
  scores_[0] = 0.0;  // every beam holds the same prompt: only the first one expands at step 1
}

void BeamSearch::add_hypothesis(double sum_logprobs, std::vector<int32_t> tokens, std::vector<float> logprobs) {
  const double score = sum_logprobs / std::pow(static_cast<double>(tokens.size()), length_penalty_);
  if (static_cast<int64_t>(finished_.size()) < num_beams_) {
    finished_.push_back({score, std::move(tokens), std::move(logprobs)});
    return;
  }
  auto worst = std::min_element(finished_.begin(), finished_.end(),
                                [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score < b.score; });
  if (score > worst->score) *worst = {score, std::move(tokens), std::move(logprobs)};
}

BeamSearch::Step BeamSearch::step(std::span<const float> logprobs, int64_t vocab, bool last_step) {
  TESSERA_CHECK(!done_, "beam search step after it finished");
  TESSERA_CHECK(static_cast<int64_t>(logprobs.size()) == num_beams_ * vocab, "beam search step: expected ",
                num_beams_, " x ", vocab, " log-probabilities, got ", logprobs.size());
  // The 2 * num_beams best (beam, token) continuations by accumulated score, best first (ties: the
  // lower flat index first, as torch.topk on CPU).
  const int64_t keep = std::min<int64_t>(2 * num_beams_, num_beams_ * vocab);
  std::vector<double> total(static_cast<size_t>(num_beams_ * vocab));
  for (int64_t b = 0; b < num_beams_; ++b)
    for (int64_t v = 0; v < vocab; ++v)
      total[b * vocab + v] = scores_[b] + static_cast<double>(logprobs[b * vocab + v]);
  std::vector<int64_t> order(total.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
    return total[a] > total[b] || (total[a] == total[b] && a < b);
  });

  Step next;
  std::vector<double> next_scores;
  std::vector<std::vector<int32_t>> next_tokens;
  std::vector<std::vector<float>> next_logprobs;
  for (int64_t rank = 0; rank < keep; ++rank) {
    const int64_t flat = order[rank], beam = flat / vocab;
    const auto token = static_cast<int32_t>(flat % vocab);
    std::vector<int32_t> tokens = tokens_[beam];
    tokens.push_back(token);
    std::vector<float> lps = logprobs_[beam];
    lps.push_back(logprobs[flat]);
    if (token == stop_token_ || last_step) {
      // Only the best num_beams continuations can finish; the others are backups to keep going.
      if (rank < num_beams_) add_hypothesis(total[flat], std::move(tokens), std::move(lps));
      if (!last_step) continue;
    }
    if (static_cast<int64_t>(next.source.size()) == num_beams_) continue;
    next.source.push_back(beam);
    next.token.push_back(token);
    next_scores.push_back(total[flat]);
    next_tokens.push_back(std::move(tokens));
    next_logprobs.push_back(std::move(lps));
  }
  TESSERA_CHECK(static_cast<int64_t>(next.source.size()) == num_beams_, "beam search kept ", next.source.size(),
                " of ", num_beams_, " beams");
  scores_ = std::move(next_scores);
  tokens_ = std::move(next_tokens);
  logprobs_ = std::move(next_logprobs);
  done_ = last_step || static_cast<int64_t>(finished_.size()) >= num_beams_;
  return next;
}

const BeamHypothesis& BeamSearch::best() const {
  TESSERA_CHECK(done_ && !finished_.empty(), "beam search has no finished hypothesis yet");
  return *std::max_element(finished_.begin(), finished_.end(),
                           [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score < b.score; });
}

}  // namespace tessera::generate
