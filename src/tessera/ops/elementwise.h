// Small elementwise helpers shared by layers: residual add, accumulation, scaling, fill and copy.
#pragma once
#include "tessera/core/tensor.h"
#include "tessera/ops/deferred_sum.h"

namespace tessera::ops {

void add(const Tensor& a, const Tensor& b, const Tensor& out);   // out = a + b (residual add)
void add_inplace(const Tensor& dst, const Tensor& src);          // dst += src
void scale_inplace(const Tensor& dst, double factor);            // dst *= factor
void fill(const Tensor& dst, double value);
void copy(const Tensor& src, const Tensor& dst);                 // same shape; converts between float dtypes
double sum_of_squares(const Tensor& t);                          // in double, for the global grad norm
// sum of mask[i] * values[i] over mask[i] != 0, in double (same shape and dtype; waits for a device).
double masked_sum(const Tensor& values, const Tensor& mask);
// The same sum without waiting: a device queues it and its copy to the host; the result's value()
// waits for them (on the CPU the sum is computed at once).
DeferredSum masked_sum_deferred(const Tensor& values, const Tensor& mask);
// Waits until every op queued on the device has finished (no-op on the CPU, whose ops are synchronous).
void synchronize(Device device);

}  // namespace tessera::ops
