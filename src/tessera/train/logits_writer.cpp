#include "tessera/train/logits_writer.h"

#include <algorithm>
#include <numeric>
#include <nlohmann/json.hpp>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"

namespace tessera::train {

namespace {
struct Candidate {
  float value;
  int32_t id;
};
// Larger logit first; equal logits: the smaller id first (a stable order on every layout).
bool before(const Candidate& a, const Candidate& b) { return a.value > b.value || (a.value == b.value && a.id < b.id); }
}  // namespace

LogitsWriter::LogitsWriter(const std::string& path, int64_t top_k, int64_t vocab_size, const parallel::TensorParallel& tp,
                           parallel::ParallelContext& context)
    : k_(top_k), vocab_(vocab_size), tp_(tp), context_(context) {
  if (top_k < 0) TESSERA_CONFIG_FAIL("--logits-top-k ", top_k, " must be >= 0 (0: the full vocabulary)");
  if (top_k == 0) {
    if (vocab_size > kMaxFullVocabulary)
      TESSERA_CONFIG_FAIL("--logits-top-k 0 writes the full vocabulary, but it has ", vocab_size, " entries (at most ",
                          kMaxFullVocabulary, "); choose a top-k");
    k_ = vocab_size;
  }
  k_ = std::min(k_, vocab_size);
  writer_ = context.pp_rank() == context.pp_size() - 1 && tp.rank == 0 && context.dp_rank() == 0;
  if (writer_) {
    out_.open(path, std::ios::out | std::ios::trunc);
    if (!out_) TESSERA_CONFIG_FAIL("--logits-file: cannot open '", path, "' for writing");
  }
}

void LogitsWriter::add(int64_t first_sample, int64_t m, const Tensor& logits, const models::LossInputs& in) {
  const int64_t rows = in.seq * in.batch, columns = logits.dim(1), k = k_;
  std::vector<float> host(static_cast<size_t>(rows * columns));
  Tensor host_f32(host.data(), DType::f32, {rows, columns});
  if (logits.dtype() == DType::f32) {
    ops::copy(logits, host_f32);
  } else {  // to the host in the logits' dtype, then converted there
    Buffer staged(logits.nbytes(), Device::cpu());
    Tensor host_logits = staged.as_tensor(logits.dtype(), logits.shape());
    ops::copy(logits, host_logits);
    ops::copy(host_logits, host_f32);
  }
  // This TP rank's k best real columns per token, as (value, global id), token-major [rows, k].
  std::vector<float> values(static_cast<size_t>(rows * k), -INFINITY);
  std::vector<int32_t> ids(static_cast<size_t>(rows * k), -1);
  const int64_t first_column = tp_.rank * columns;
  std::vector<Candidate> row;
  for (int64_t r = 0; r < rows; ++r) {
    row.clear();
    for (int64_t c = 0; c < columns && first_column + c < vocab_; ++c)
      row.push_back({host[static_cast<size_t>(r * columns + c)], static_cast<int32_t>(first_column + c)});
    const size_t keep = std::min<size_t>(row.size(), static_cast<size_t>(k));
    std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(keep), row.end(), before);
    for (size_t i = 0; i < keep; ++i) {
      values[static_cast<size_t>(r * k) + i] = row[i].value;
      ids[static_cast<size_t>(r * k) + i] = row[i].id;
    }
  }
  // Merge over TP: every rank's k candidates per token, the best k of them.
  if (tp_.enabled()) {
    std::vector<float> all_values(values.size() * static_cast<size_t>(tp_.size));
    std::vector<int32_t> all_ids(ids.size() * static_cast<size_t>(tp_.size));
    const int64_t n = static_cast<int64_t>(values.size());
    tp_.comm->all_gather(Tensor(values.data(), DType::f32, {n}), Tensor(all_values.data(), DType::f32, {n * tp_.size}));
    tp_.comm->all_gather(Tensor(ids.data(), DType::i32, {n}), Tensor(all_ids.data(), DType::i32, {n * tp_.size}));
    for (int64_t r = 0; r < rows; ++r) {
      row.clear();
      for (int64_t t = 0; t < tp_.size; ++t)
        for (int64_t i = 0; i < k; ++i) {
          const size_t at = static_cast<size_t>(t * n + r * k + i);
          if (all_ids[at] >= 0) row.push_back({all_values[at], all_ids[at]});
        }
      std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
      for (int64_t i = 0; i < k; ++i) {
        values[static_cast<size_t>(r * k + i)] = row[static_cast<size_t>(i)].value;
        ids[static_cast<size_t>(r * k + i)] = row[static_cast<size_t>(i)].id;
      }
    }
  }
  // Gather over DP (the inputs too), then the writer emits the samples in order.
  const int dp = context_.dp_size();
  std::vector<int32_t> tokens(in.tokens.begin(), in.tokens.end());
  std::vector<float> all_values = values;
  std::vector<int32_t> all_ids = ids, all_tokens = tokens;
  if (dp > 1) {
    all_values.resize(values.size() * static_cast<size_t>(dp));
    all_ids.resize(ids.size() * static_cast<size_t>(dp));
    all_tokens.resize(tokens.size() * static_cast<size_t>(dp));
    const auto n = static_cast<int64_t>(values.size()), t = static_cast<int64_t>(tokens.size());
    context_.data().all_gather(Tensor(values.data(), DType::f32, {n}), Tensor(all_values.data(), DType::f32, {n * dp}));
    context_.data().all_gather(Tensor(ids.data(), DType::i32, {n}), Tensor(all_ids.data(), DType::i32, {n * dp}));
    context_.data().all_gather(Tensor(tokens.data(), DType::i32, {t}), Tensor(all_tokens.data(), DType::i32, {t * dp}));
  }
  if (!writer_) return;
  const int64_t b = in.batch, s = in.seq, block = rows * k;
  for (int d = 0; d < dp; ++d) {
    for (int64_t j = 0; j < b; ++j) {
      nlohmann::json row_json;
      row_json["sample"] = first_sample + (m * dp + d) * b + j;
      std::vector<int32_t> input(static_cast<size_t>(s));
      for (int64_t p = 0; p < s; ++p) input[static_cast<size_t>(p)] = all_tokens[static_cast<size_t>(d * b * (s + 1) + j * (s + 1) + p)];
      row_json["input_ids"] = input;
      nlohmann::json top_ids = nlohmann::json::array(), top_logits = nlohmann::json::array();
      for (int64_t p = 0; p < s; ++p) {
        const size_t at = static_cast<size_t>(d * block + (p * b + j) * k);
        top_ids.push_back(std::vector<int32_t>(all_ids.begin() + static_cast<std::ptrdiff_t>(at),
                                               all_ids.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(k))));
        top_logits.push_back(std::vector<float>(all_values.begin() + static_cast<std::ptrdiff_t>(at),
                                                all_values.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(k))));
      }
      row_json["top_ids"] = std::move(top_ids);
      row_json["top_logits"] = std::move(top_logits);
      out_ << row_json.dump() << "\n";
    }
  }
  out_.flush();
  if (!out_) TESSERA_FAIL("writing the logits file failed (disk full?)");
}

}  // namespace tessera::train
