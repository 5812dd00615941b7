// SnapshotStaging (the async save's host snapshot) on the CPU: copy() returns host tensors holding
// the values at the time of the copy, later changes to the source do not reach them, and a later
// snapshot (or a reserve pass before it) reuses the same buffers in the same order.
#include <gtest/gtest.h>

#include "tessera/core/buffer.h"
#include "tessera/runtime/snapshot_staging.h"

namespace tessera {
namespace {

TEST(SnapshotStaging, CopiesValuesAndReusesItsBuffers) {
  Buffer a_buffer(4 * sizeof(float)), b_buffer(2 * sizeof(int32_t));
  Tensor a = a_buffer.as_tensor(DType::f32, {2, 2});
  Tensor b = b_buffer.as_tensor(DType::i32, {2});
  for (int i = 0; i < 4; ++i) a.data_as<float>()[i] = 1.5f * i;
  b.data_as<int32_t>()[0] = 7;
  b.data_as<int32_t>()[1] = -3;

  SnapshotStaging staging;
  staging.begin();
  staging.reserve(a);
  staging.reserve(Tensor());  // undefined: skipped, takes no buffer
  staging.reserve(b);
  staging.end();
  EXPECT_EQ(staging.host_bytes(), 4 * sizeof(float) + 2 * sizeof(int32_t));

  staging.begin();
  Tensor a1 = staging.copy(a);
  EXPECT_FALSE(staging.copy(Tensor()).defined());
  Tensor b1 = staging.copy(b);
  staging.end();
  staging.order_before_update();
  staging.wait_host();
  EXPECT_EQ(staging.host_bytes(), 4 * sizeof(float) + 2 * sizeof(int32_t));  // the reserved buffers
  ASSERT_EQ(a1.shape(), a.shape());
  EXPECT_NE(a1.data(), a.data());
  a.data_as<float>()[3] = 99.0f;  // the live tensor moves on; the snapshot does not
  EXPECT_EQ(a1.data_as<float>()[3], 4.5f);
  EXPECT_EQ(b1.data_as<int32_t>()[1], -3);

  staging.begin();
  Tensor a2 = staging.copy(a);
  Tensor b2 = staging.copy(b);
  staging.end();
  EXPECT_EQ(a2.data(), a1.data());  // reused, not reallocated
  EXPECT_EQ(b2.data(), b1.data());
  EXPECT_EQ(a2.data_as<float>()[3], 99.0f);
}

}  // namespace
}  // namespace tessera
