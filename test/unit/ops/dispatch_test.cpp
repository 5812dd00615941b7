// Device dispatch in a CPU-only build: every op given a CUDA tensor fails naming the op, and mixed
// devices fail. (A CUDA build runs those tensors through kernels/: test/gpu's parity suite.)
#include "tessera/ops/activation.h"
#include "tessera/ops/adamw.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/cross_entropy.h"
#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/layernorm.h"
#include "tessera/ops/linear.h"
#include "op_test_util.h"

namespace tessera {
namespace {

TEST(OpsDispatch, CudaTensorsFailNamingTheOp) {
#ifdef TESSERA_HAVE_CUDA
  GTEST_SKIP() << "CUDA build: CUDA tensors run on kernels (test/gpu/ops_parity_test)";
#endif
  float fake[64] = {};
  const Tensor g(fake, DType::f32, {2, 4}, Device::cuda(0));
  const Tensor g1(fake, DType::f32, {4}, Device::cuda(0));
  const Tensor ids(fake, DType::i32, {2}, Device::cuda(0));
  const RandomStream rng(1, 1);
  auto expect_cuda = [](const char* op, const std::function<void()>& body) {
    test::expect_error_containing(body, {std::string("no CUDA kernel for ") + op + ": this build has no CUDA backend"});
  };
  expect_cuda("gelu_forward", [&] { ops::gelu_forward(g, g); });
  expect_cuda("gelu_backward", [&] { ops::gelu_backward(g, g, g); });
  expect_cuda("linear_forward", [&] { ops::linear_forward(g, g, Tensor(), g); });
  expect_cuda("linear_backward", [&] { ops::linear_backward(g, g, g, g, g, Tensor()); });
  expect_cuda("matmul_nt", [&] { ops::matmul_nt(g, g, g, false); });
  expect_cuda("layernorm_forward", [&] { ops::layernorm_forward(g, g1, g1, 1e-5, g, g1, g1); });
  expect_cuda("layernorm_backward", [&] { ops::layernorm_backward(g, g, g1, g1, g1, g, g1, g1); });
  expect_cuda("embedding_forward", [&] { ops::embedding_forward(ids, g, g); });
  expect_cuda("embedding_backward", [&] { ops::embedding_backward(ids, g, g); });
  expect_cuda("dropout_forward", [&] { ops::dropout_forward(g, 0.1, rng, 0, g); });
  expect_cuda("dropout_backward", [&] { ops::dropout_backward(g, 0.1, rng, 0, g); });
  expect_cuda("cross_entropy_forward", [&] { ops::cross_entropy_forward(g, ids, 4, ids, ids); });
  expect_cuda("cross_entropy_backward", [&] { ops::cross_entropy_backward(g, ids, ids, ids, 4, g); });
  expect_cuda("attention_forward", [&] { ops::attention_forward(g, Tensor(), {}, rng, g, g); });
  expect_cuda("attention_backward", [&] { ops::attention_backward(g, g, g, {}, rng, g); });
  expect_cuda("adamw_update", [&] { ops::adamw_update(g, g, g, g, {}); });
  expect_cuda("add", [&] { ops::add(g, g, g); });
  expect_cuda("add_inplace", [&] { ops::add_inplace(g, g); });
  expect_cuda("scale_inplace", [&] { ops::scale_inplace(g, 2.0); });
  expect_cuda("fill", [&] { ops::fill(g, 0.0); });
  expect_cuda("copy", [&] { ops::copy(g, g); });
  expect_cuda("sum_of_squares", [&] { ops::sum_of_squares(g); });
  for (float v : fake) EXPECT_EQ(v, 0.0f);  // nothing touched the "device" memory
}

TEST(OpsDispatch, CpuAndCudaMixFailsOnTheCudaTensor) {
  test::OwnedTensor cpu(DType::f32, {4});
  float fake[4] = {};
  const Tensor gpu(fake, DType::f32, {4}, Device::cuda(0));
  test::expect_error_containing([&] { ops::add_inplace(cpu, gpu); }, {"add_inplace: tensors on different devices"});
}

}  // namespace
}  // namespace tessera
