// DeferredSum: a sum of doubles whose terms a device may still be computing (masked_sum_deferred
// in ops/elementwise.h). Adding terms never waits for the device; value() waits for the pending
// terms once and keeps the total. Terms are added left to right as `double total = 0; total +=
// term;` adds them, a pending term counting as the one double it will be, so the total is bit for
// bit the one that reading each term when it was made would give. The training loss is summed so
// (models::LossSum): a step reads it once, after its last kernel is queued, instead of once per
// micro-batch in the middle of the backward.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

namespace tessera::ops {

// A double a device op is delivering to host memory: wait() blocks until it is there.
class PendingDouble {
 public:
  virtual ~PendingDouble() = default;
  virtual double wait() const = 0;
};

class DeferredSum {
 public:
  // More pending terms than this and operator+= waits for them (bounds the host slots held).
  static constexpr size_t kMaxPendingTerms = 256;

  DeferredSum() = default;
  DeferredSum(double ready) : total_(ready) {}  // a host value: implicit, as a double would convert
  explicit DeferredSum(std::shared_ptr<const PendingDouble> pending);

  DeferredSum& operator+=(const DeferredSum& term);
  // The total; the first call after a pending term was added waits for the device.
  double value() const;
  bool has_pending_terms() const { return !terms_.empty(); }

 private:
  // The sum of the terms resolved so far; terms_ follow it in the order they were added.
  mutable double total_ = 0;
  mutable std::vector<std::shared_ptr<const PendingDouble>> terms_;
};

}  // namespace tessera::ops
