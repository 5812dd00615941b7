// Beam search for one prompt, as Hugging Face `generate` defines it (num_beams, length_penalty,
// early_stopping = True): beams start from the prompt with scores [0, -1e9, ...]; each step takes
// the 2 * num_beams best (beam score + log_softmax) continuations; one ending in the stop token
// among the first num_beams of them becomes a finished hypothesis scored
// sum_logprobs / generated_length ** length_penalty (generated_length counts the stop token), the
// others (up to num_beams) continue. Done once num_beams hypotheses are finished (early stopping);
// at max_new_tokens the running beams finish too. The result is the best finished hypothesis.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace tessera::generate {

struct BeamHypothesis {
  double score = 0;                 // length-normalised
  std::vector<int32_t> tokens;      // generated tokens (with the stop token when it ended on one)
  std::vector<float> logprobs;      // each generated token's log-probability
};

class BeamSearch {
 public:
  // stop_token < 0: none.
  BeamSearch(int64_t num_beams, double length_penalty, int64_t stop_token);

  struct Step {
    std::vector<int64_t> source;  // new beam i continues old beam source[i]
    std::vector<int32_t> token;   // with this token
  };
  // logprobs: num_beams rows of `vocab` log-probabilities (the beams' next-token distributions).
  // last_step: max_new_tokens is reached with this token, so every running beam finishes.
  Step step(std::span<const float> logprobs, int64_t vocab, bool last_step);
  bool done() const { return done_; }
  const BeamHypothesis& best() const;  // after done()
  int64_t num_beams() const { return num_beams_; }

 private:
  void add_hypothesis(double sum_logprobs, std::vector<int32_t> tokens, std::vector<float> logprobs);

  int64_t num_beams_;
  double length_penalty_;
  int64_t stop_token_;
  std::vector<double> scores_;                 // running beams' summed log-probabilities
  std::vector<std::vector<int32_t>> tokens_;   // running beams' generated tokens
  std::vector<std::vector<float>> logprobs_;
  std::vector<BeamHypothesis> finished_;       // best num_beams, unordered
  bool done_ = false;
};

}  // namespace tessera::generate
