// Runtime on a single rank: init/get, device selection errors, and the bf16/f16 MPI reduction ops
// (applied with MPI_Reduce_local, so no second rank is needed).
#include <gtest/gtest.h>

#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/mpi_types.h"
#include "tessera/runtime/runtime.h"

namespace tessera {
namespace {

Runtime& runtime() { return Runtime::init(nullptr, nullptr); }

TEST(Runtime, SingleRankInit) {
  Runtime& rt = runtime();
  EXPECT_EQ(&rt, &Runtime::get());
  EXPECT_EQ(rt.world_size(), 1);
  EXPECT_EQ(rt.world_rank(), 0);
  EXPECT_EQ(rt.local_rank(), 0);
}

TEST(Runtime, DeviceSelection) {
  Runtime& rt = runtime();
  EXPECT_TRUE(rt.select_device("cpu").is_cpu());
  EXPECT_THROW(rt.select_device("tpu"), ConfigError);
#ifndef TESSERA_HAVE_CUDA
  EXPECT_TRUE(rt.select_device("auto").is_cpu());
  try {
    rt.select_device("cuda");
    FAIL() << "cuda accepted on a CPU-only build";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("without CUDA"), std::string::npos) << e.message();
  }
#endif
}

TEST(MpiTypes, SixteenBitReductionsAddInFloat) {
  runtime();
  std::vector<bf16> a = {float_to_bf16(1.5f), float_to_bf16(-3.0f), float_to_bf16(256.0f)};
  std::vector<bf16> b = {float_to_bf16(2.25f), float_to_bf16(7.0f), float_to_bf16(1.0f)};
  TESSERA_MPI_CHECK(MPI_Reduce_local(a.data(), b.data(), 3, detail::mpi_datatype(DType::bf16),
                                     detail::mpi_reduce_op(DType::bf16, ReduceOp::sum)));
  EXPECT_EQ(bf16_to_float(b[0]), 3.75f);
  EXPECT_EQ(bf16_to_float(b[1]), 4.0f);
  EXPECT_EQ(bf16_to_float(b[2]), 256.0f);  // 257 rounds to even in bf16's 8-bit mantissa

  std::vector<f16> c = {float_to_f16(-1.0f), float_to_f16(5.0f)};
  std::vector<f16> d = {float_to_f16(2.0f), float_to_f16(-6.0f)};
  TESSERA_MPI_CHECK(MPI_Reduce_local(c.data(), d.data(), 2, detail::mpi_datatype(DType::f16),
                                     detail::mpi_reduce_op(DType::f16, ReduceOp::max)));
  EXPECT_EQ(f16_to_float(d[0]), 2.0f);
  EXPECT_EQ(f16_to_float(d[1]), 5.0f);
  std::vector<f16> e = {float_to_f16(-1.0f), float_to_f16(5.0f)};
  std::vector<f16> f = {float_to_f16(2.0f), float_to_f16(-6.0f)};
  TESSERA_MPI_CHECK(MPI_Reduce_local(e.data(), f.data(), 2, detail::mpi_datatype(DType::f16),
                                     detail::mpi_reduce_op(DType::f16, ReduceOp::min)));
  EXPECT_EQ(f16_to_float(f[0]), -1.0f);
  EXPECT_EQ(f16_to_float(f[1]), -6.0f);
  EXPECT_THROW(detail::mpi_datatype(DType::u8), Error);
}

}  // namespace
}  // namespace tessera
