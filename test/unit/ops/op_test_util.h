// Helpers for the op tests: owned host tensors filled from a RandomStream, and a central finite
// difference check of an analytic gradient against a scalar loss.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/elementwise.h"

namespace tessera::test {

// A zero-filled CPU tensor that owns its memory.
class OwnedTensor {
 public:
  OwnedTensor(DType dtype, Shape shape)
      : buffer_(std::max<size_t>(1, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype))),
        tensor_(buffer_.as_tensor(dtype, std::move(shape))) {}
  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT: used as an op argument
  template <typename T>
  T* data() const { return tensor_.data_as<T>(); }
  template <typename T>
  T& at(int64_t i) const { return tensor_.data_as<T>()[i]; }
  int64_t numel() const { return tensor_.numel(); }

 private:
  Buffer buffer_;
  Tensor tensor_;
};

// Fills a float tensor with scale * N(0, 1) draws of a stream.
inline void fill_normal(const OwnedTensor& t, uint64_t stream, double scale = 1.0) {
  RandomStream rng(20240601, stream);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = scale * rng.normal(static_cast<uint64_t>(i));
    if (t.tensor().dtype() == DType::f64) t.at<double>(i) = v;
    else t.at<float>(i) = static_cast<float>(v);
  }
}

// A tensor of dtype t (f32 / f64 or a storage dtype) holding fill_normal's draws rounded to t.
inline OwnedTensor normal_tensor(DType t, const Shape& shape, uint64_t stream, double scale = 1.0) {
  OwnedTensor f(DType::f32, shape);
  fill_normal(f, stream, scale);
  OwnedTensor out(t, shape);
  ops::copy(f, out);
  return out;
}

// Copies an f64 tensor into an f32 one of the same numel.
inline void copy_to_f32(const OwnedTensor& from, const OwnedTensor& to) {
  for (int64_t i = 0; i < from.numel(); ++i) to.at<float>(i) = static_cast<float>(from.at<double>(i));
}

// sum_i a[i] * b[i] over two f64 tensors: the scalar loss whose gradient wrt a is b.
inline double dot(const OwnedTensor& a, const OwnedTensor& b) {
  double sum = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) sum += a.at<double>(i) * b.at<double>(i);
  return sum;
}

// For each element of x (f64): central difference (loss(x + eps) - loss(x - eps)) / 2 eps must
// match analytic[i] within rtol * |analytic| + atol. Also requires the gradient to be non-trivial.
inline void expect_gradient_matches(const std::function<double()>& loss, const OwnedTensor& x,
                                    const std::vector<double>& analytic, const std::string& what, double eps = 1e-6,
                                    double rtol = 1e-6, double atol = 1e-8) {
  ASSERT_EQ(static_cast<int64_t>(analytic.size()), x.numel()) << what;
  double largest = 0.0;
  int failures = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double& xi = x.at<double>(i);
    const double saved = xi;
    xi = saved + eps;
    const double plus = loss();
    xi = saved - eps;
    const double minus = loss();
    xi = saved;
    const double numeric = (plus - minus) / (2 * eps);
    largest = std::max(largest, std::abs(analytic[i]));
    if (std::abs(numeric - analytic[i]) > rtol * std::abs(analytic[i]) + atol && failures++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: finite difference " << numeric << " vs analytic " << analytic[i];
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " elements differ";
  EXPECT_GT(largest, 1e-3) << what << ": the gradient is (nearly) zero, so the check proves nothing";
}

inline std::vector<double> values_of(const OwnedTensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

// Runs `body` and expects a tessera::Error whose message contains every string in `parts`.
inline void expect_error_containing(const std::function<void()>& body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "expected an error mentioning '" << (parts.empty() ? "" : parts[0]) << "'";
  } catch (const Error& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what() << "\nmissing: " << part;
  }
}

}  // namespace tessera::test
