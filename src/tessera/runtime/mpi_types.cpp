#include "tessera/runtime/mpi_types.h"

#include <algorithm>

#include "tessera/core/half.h"
#include "tessera/runtime/mpi_check.h"

namespace tessera::detail {

namespace {

// inout[i] = combine(in[i], inout[i]) computed in float, for 16-bit float storage types.
template <typename Half, float (*ToFloat)(Half), Half (*FromFloat)(float), ReduceOp Op>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const Half* a = static_cast<const Half*>(in);
  Half* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = ToFloat(a[i]), y = ToFloat(b[i]);
    float r = Op == ReduceOp::sum ? x + y : Op == ReduceOp::max ? std::max(x, y) : std::min(x, y);
    b[i] = FromFloat(r);
  }
}

struct UserOps {
  MPI_Op ops[2][3];  // [bf16, f16][sum, max, min]
  UserOps() {
    MPI_User_function* fns[2][3] = {
        {reduce_16bit<bf16, bf16_to_float, float_to_bf16, ReduceOp::sum>,
         reduce_16bit<bf16, bf16_to_float, float_to_bf16, ReduceOp::max>,
         reduce_16bit<bf16, bf16_to_float, float_to_bf16, ReduceOp::min>},
        {reduce_16bit<f16, f16_to_float, float_to_f16, ReduceOp::sum>,
         reduce_16bit<f16, f16_to_float, float_to_f16, ReduceOp::max>,
         reduce_16bit<f16, f16_to_float, float_to_f16, ReduceOp::min>}};
    for (int t = 0; t < 2; ++t)
      for (int o = 0; o < 3; ++o) TESSERA_MPI_CHECK(MPI_Op_create(fns[t][o], /*commute=*/1, &ops[t][o]));
  }
};

int op_index(ReduceOp op) { return op == ReduceOp::sum ? 0 : op == ReduceOp::max ? 1 : 2; }

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: break;
  }
  TESSERA_FAIL("no MPI datatype for ", dtype_name(dtype), "; communicators support f32, bf16, f16, i32, i64");
}

MPI_Op mpi_reduce_op(DType dtype, ReduceOp op) {
  if (op == ReduceOp::avg)
    TESSERA_FAIL("reduce op avg is supported by the NCCL backend only; on MPI reduce with sum and divide");
  if (dtype == DType::bf16 || dtype == DType::f16) {
    static UserOps user_ops;  // created on first use, after MPI_Init
    return user_ops.ops[dtype == DType::bf16 ? 0 : 1][op_index(op)];
  }
  return op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::max ? MPI_MAX : MPI_MIN;
}

}  // namespace tessera::detail
