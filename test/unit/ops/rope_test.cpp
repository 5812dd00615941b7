// Rotary position embedding: a hand-computed case, the HF / Megatron rotate_half formula with
// explicit per-batch positions, backward(forward(x)) == x, backward against finite differences, the
// row form on Megatron's fused QKV layout, and argument errors.
#include "tessera/ops/rope.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsRope, HandComputedSmallCase) {
  // s = 2, b = 1, one head of hn = 4: inv_freq = [1, 10000^-0.5 = 0.01]; position 0 is the identity.
  OwnedTensor x(DType::f64, {2, 1, 1, 4});
  for (int i = 0; i < 8; ++i) x.at<double>(i) = i % 4 + 1;  // [1, 2, 3, 4] at both positions
  ops::rope_forward(x, Tensor(), 10000.0);
  const double expected[8] = {1, 2, 3, 4,
                              1 * std::cos(1.0) - 3 * std::sin(1.0), 2 * std::cos(0.01) - 4 * std::sin(0.01),
                              3 * std::cos(1.0) + 1 * std::sin(1.0), 4 * std::cos(0.01) + 2 * std::sin(0.01)};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(x.at<double>(i), expected[i], 1e-14) << i;
}

// HF Llama: emb = cat(freqs, freqs); q_embed = q * cos(emb) + rotate_half(q) * sin(emb),
// rotate_half(q) = cat(-q[half:], q[:half]).
TEST(OpsRope, MatchesRotateHalfFormulaWithPerBatchPositions) {
  const int64_t s = 5, b = 2, heads = 3, hn = 8, half = hn / 2;
  const double theta = 500000.0;
  OwnedTensor x(DType::f64, {s, b, heads, hn}), original(DType::f64, {s, b, heads, hn});
  test::fill_normal(x, 1);
  for (int64_t i = 0; i < x.numel(); ++i) original.at<double>(i) = x.at<double>(i);
  OwnedTensor positions(DType::i32, {b, s});
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si) positions.at<int32_t>(bi * s + si) = static_cast<int32_t>(bi == 0 ? si : 100 + 7 * si);
  ops::rope_forward(x, positions, theta);
  for (int64_t si = 0; si < s; ++si)
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < heads; ++h) {
        const double* q = &original.at<double>(((si * b + bi) * heads + h) * hn);
        const double* got = &x.at<double>(((si * b + bi) * heads + h) * hn);
        const double pos = positions.at<int32_t>(bi * s + si);
        for (int64_t d = 0; d < hn; ++d) {
          const double freq = pos / std::pow(theta, double(2 * (d % half)) / double(hn));  // emb[d]
          const double rotated = d < half ? -q[d + half] : q[d - half];                  // rotate_half(q)[d]
          EXPECT_NEAR(got[d], q[d] * std::cos(freq) + rotated * std::sin(freq), 1e-12) << si << " " << bi << " " << d;
        }
      }
  // [s] positions equal to 0..s-1 match undefined positions.
  OwnedTensor a(DType::f32, {s, b, heads, hn}), c(DType::f32, {s, b, heads, hn}), seq(DType::i32, {s});
  test::fill_normal(a, 2);
  test::fill_normal(c, 2);
  for (int64_t si = 0; si < s; ++si) seq.at<int32_t>(si) = static_cast<int32_t>(si);
  ops::rope_forward(a, Tensor());
  ops::rope_forward(c, seq);
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.at<float>(i), c.at<float>(i));
}

TEST(OpsRope, BackwardOfForwardIsIdentity) {
  const int64_t s = 7, b = 3, heads = 2, hn = 6;
  OwnedTensor x(DType::f64, {s, b, heads, hn}), x32(DType::f32, {s, b, heads, hn});
  test::fill_normal(x, 3);
  test::copy_to_f32(x, x32);
  const auto original = test::values_of(x);
  OwnedTensor positions(DType::i32, {s});
  for (int64_t si = 0; si < s; ++si) positions.at<int32_t>(si) = static_cast<int32_t>(1000 * si + 3);
  ops::rope_forward(x, positions);
  int changed = 0;
  for (int64_t i = 0; i < x.numel(); ++i) changed += std::abs(x.at<double>(i) - original[i]) > 1e-3;
  EXPECT_GT(changed, x.numel() / 2);
  ops::rope_backward(x, positions);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(x.at<double>(i), original[i], 1e-12) << i;
  ops::rope_forward(x32, positions);
  ops::rope_backward(x32, positions);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(x32.at<float>(i), original[i], 1e-5) << i;
}

TEST(OpsRope, BackwardMatchesFiniteDifferences) {
  const int64_t s = 3, b = 2, heads = 2, hn = 4;
  OwnedTensor x(DType::f64, {s, b, heads, hn}), y(DType::f64, {s, b, heads, hn}), dy(DType::f64, {s, b, heads, hn});
  test::fill_normal(x, 4);
  test::fill_normal(dy, 5);
  auto loss = [&] {
    for (int64_t i = 0; i < x.numel(); ++i) y.at<double>(i) = x.at<double>(i);
    ops::rope_forward(y, Tensor(), 100.0);
    return test::dot(y, dy);
  };
  OwnedTensor dx(DType::f64, {s, b, heads, hn});
  for (int64_t i = 0; i < dx.numel(); ++i) dx.at<double>(i) = dy.at<double>(i);
  ops::rope_backward(dx, Tensor(), 100.0);
  test::expect_gradient_matches(loss, x, test::values_of(dx), "dx");
}

TEST(OpsRope, RowsFormRotatesQueriesAndKeysInsideFusedQkv) {
  // Megatron QKV [s, b, (na + 2 ng) hn], per group: hpg query heads, one key head, one value head.
  const int64_t s = 4, b = 2, na = 4, ng = 2, hn = 6, hpg = na / ng, width = (na + 2 * ng) * hn;
  const int64_t group_stride = (hpg + 2) * hn;
  OwnedTensor qkv(DType::f64, {s, b, width});
  test::fill_normal(qkv, 6);
  const auto original = test::values_of(qkv);
  OwnedTensor positions(DType::i32, {b, s});
  for (int64_t i = 0; i < b * s; ++i) positions.at<int32_t>(i) = static_cast<int32_t>(3 * i + 1);
  ops::RopeHeads queries{0, hpg, hn, ng, group_stride}, keys{hpg * hn, 1, hn, ng, group_stride};
  ops::rope_forward_rows(qkv, queries, positions);
  ops::rope_forward_rows(qkv, keys, positions);
  // Reference: copy each head vector into [s, b, 1, hn], rotate it alone, compare; values unchanged.
  for (int64_t g = 0; g < ng; ++g)
    for (int64_t h = 0; h < hpg + 2; ++h) {
      OwnedTensor head(DType::f64, {s, b, 1, hn});
      for (int64_t r = 0; r < s * b; ++r)
        for (int64_t d = 0; d < hn; ++d) head.at<double>(r * hn + d) = original[r * width + g * group_stride + h * hn + d];
      const bool rotated = h < hpg + 1;  // queries and the key
      if (rotated) ops::rope_forward(head, positions);
      for (int64_t r = 0; r < s * b; ++r)
        for (int64_t d = 0; d < hn; ++d)
          EXPECT_EQ(qkv.at<double>(r * width + g * group_stride + h * hn + d), head.at<double>(r * hn + d))
              << "group " << g << " head " << h;
    }
  ops::rope_backward_rows(qkv, keys, positions);
  ops::rope_backward_rows(qkv, queries, positions);
  for (int64_t i = 0; i < qkv.numel(); ++i) EXPECT_NEAR(qkv.at<double>(i), original[i], 1e-12);
}

TEST(OpsRope, ArgumentErrors) {
  OwnedTensor x(DType::f32, {3, 2, 2, 4}), odd(DType::f32, {3, 2, 2, 5}), flat(DType::f32, {3, 8});
  test::expect_error_containing([&] { ops::rope_forward(odd, Tensor()); }, {"rope_forward", "head_dim", "even", "5"});
  test::expect_error_containing([&] { ops::rope_forward(flat, Tensor()); },
                                {"rope_forward", "x must be [s, b, heads, head_dim]", "f32[3, 8]"});
  OwnedTensor i64_pos(DType::i64, {3}), short_pos(DType::i32, {2}), swapped(DType::i32, {3, 2});
  test::expect_error_containing([&] { ops::rope_forward(x, i64_pos); }, {"positions must be i32", "i64[3]"});
  test::expect_error_containing([&] { ops::rope_forward(x, short_pos); }, {"positions must be [3], [2, 3] or one per row [6]", "i32[2]"});
  test::expect_error_containing([&] { ops::rope_forward(x, swapped); }, {"positions must be [3], [2, 3] or one per row [6]"});
  test::expect_error_containing([&] { ops::rope_backward(x, Tensor(), 0.0); }, {"rope_backward", "theta", "> 0"});
  OwnedTensor rows(DType::f32, {3, 2, 20});
  test::expect_error_containing([&] { ops::rope_forward_rows(rows, ops::RopeHeads{8, 2, 8, 1, 0}, Tensor()); },
                                {"rope_forward_rows", "end at element 24", "f32[3, 2, 20]"});
  test::expect_error_containing([&] { ops::rope_forward_rows(rows, ops::RopeHeads{0, 2, 4, 2, 4}, Tensor()); },
                                {"group_stride (4) must be >= heads * head_dim (8)"});
  OwnedTensor ints(DType::i32, {3, 2, 20});
  test::expect_error_containing([&] { ops::rope_forward_rows(ints, ops::RopeHeads{0, 1, 4, 1, 0}, Tensor()); },
                                {"rows must be f32 or f64"});
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Partial rotary (rotary_dim < head_dim: the trailing dims pass through), interleaved pairs and
// per-row positions [s*b] against the definition, and the backward against finite differences.
TEST(OpsRope, PartialInterleavedPerRowPositionsMatchTheDefinition) {
  const int64_t s = 3, b = 2, hn = 8, rd = 4;
  for (bool interleaved : {false, true}) {
    test::OwnedTensor x(DType::f64, {s, b, hn}), ref(DType::f64, {s, b, hn});
    test::fill_normal(x, 31);
    for (int64_t i = 0; i < x.numel(); ++i) ref.at<double>(i) = x.at<double>(i);
    std::vector<int32_t> pos = {4, 0, 7, 2, 9, 5};  // row s*b + bi
    ops::RopeHeads heads;
    heads.heads = 1, heads.head_dim = hn, heads.rotary_dim = rd, heads.interleaved = interleaved;
    ops::rope_forward_rows(x, heads, Tensor(pos.data(), DType::i32, {s * b}), 50.0);
    for (int64_t row = 0; row < s * b; ++row) {
      const double* in = ref.data<double>() + row * hn;
      const double* out = x.data<double>() + row * hn;
      for (int64_t i = 0; i < rd / 2; ++i) {
        const double angle = pos[row] * std::pow(50.0, -2.0 * i / rd);
        const int64_t a = interleaved ? 2 * i : i, c = interleaved ? 2 * i + 1 : i + rd / 2;
        EXPECT_NEAR(out[a], in[a] * std::cos(angle) - in[c] * std::sin(angle), 1e-12);
        EXPECT_NEAR(out[c], in[c] * std::cos(angle) + in[a] * std::sin(angle), 1e-12);
      }
      for (int64_t d = rd; d < hn; ++d) EXPECT_EQ(out[d], in[d]) << "dim " << d << " must pass through";
    }
    // The backward (rotation by -angle) is the gradient of the forward.
    test::OwnedTensor dy(DType::f64, {s, b, hn}), y(DType::f64, {s, b, hn}), dx(DType::f64, {s, b, hn});
    test::fill_normal(dy, 32);
    for (int64_t i = 0; i < dx.numel(); ++i) dx.at<double>(i) = dy.at<double>(i);
    ops::rope_backward_rows(dx, heads, Tensor(pos.data(), DType::i32, {s * b}), 50.0);
    auto loss = [&] {
      for (int64_t i = 0; i < y.numel(); ++i) y.at<double>(i) = ref.at<double>(i);
      ops::rope_forward_rows(y, heads, Tensor(pos.data(), DType::i32, {s * b}), 50.0);
      return test::dot(y, dy);
    };
    test::expect_gradient_matches(loss, ref, test::values_of(dx), interleaved ? "drope interleaved" : "drope");
  }
  ops::RopeHeads odd;
  odd.heads = 1, odd.head_dim = 8, odd.rotary_dim = 3;
  test::OwnedTensor x(DType::f32, {2, 1, 8});
  test::expect_error_containing([&] { ops::rope_forward_rows(x, odd, Tensor()); }, {"rotary_dim must be even"});
}

}  // namespace
}  // namespace tessera
