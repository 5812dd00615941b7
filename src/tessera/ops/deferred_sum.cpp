#include "tessera/ops/deferred_sum.h"

#include <utility>

#include "tessera/core/error.h"

namespace tessera::ops {
namespace {

// A term that is itself a sum (added after a pending term, so it must wait its turn).
class SumTerm final : public PendingDouble {
 public:
  explicit SumTerm(DeferredSum sum) : sum_(std::move(sum)) {}
  double wait() const override { return sum_.value(); }

 private:
  DeferredSum sum_;
};

}  // namespace

DeferredSum::DeferredSum(std::shared_ptr<const PendingDouble> pending) {
  TESSERA_CHECK(pending != nullptr, "DeferredSum: a pending term must not be null");
  terms_.push_back(std::move(pending));  // 0 + term: the term itself
}

DeferredSum& DeferredSum::operator+=(const DeferredSum& term) {
  if (terms_.empty() && term.terms_.empty()) {
    total_ += term.total_;
    return *this;
  }
  terms_.push_back(std::make_shared<SumTerm>(term));
  if (terms_.size() > kMaxPendingTerms) value();
  return *this;
}

double DeferredSum::value() const {
  for (const auto& term : terms_) total_ += term->wait();
  terms_.clear();
  return total_;
}

}  // namespace tessera::ops
