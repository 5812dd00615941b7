#include "tessera/convert/hf_layout.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::convert {

using models::HfLayout;

namespace {

// Tessera QKV row (per head: q, k, v blocks of head_dim) -> HF column ([q | k | v], heads inside).
int64_t hf_qkv_index(int64_t row, int64_t heads, int64_t head_dim) {
  const int64_t head = row / (3 * head_dim), part = (row / head_dim) % 3, d = row % head_dim;
  return part * heads * head_dim + head * head_dim + d;
}

void check_qkv(const Shape& global, const HfLayoutContext& ctx) {
  TESSERA_CHECK(!global.empty() && ctx.num_heads > 0 && global[0] % (3 * ctx.num_heads) == 0, "QKV tensor of shape ",
                shape_string(global), " does not split into 3 x ", ctx.num_heads, " heads");
}

}  // namespace

Shape hf_shape(HfLayout layout, const Shape& global, const HfLayoutContext& ctx) {
  switch (layout) {
    case HfLayout::same:
    case HfLayout::qkv_bias: return global;
    case HfLayout::transposed:
    case HfLayout::qkv_weight:
      TESSERA_CHECK(global.size() == 2, "a transposed tensor must be 2-D, got ", shape_string(global));
      return {global[1], global[0]};
    case HfLayout::vocab_rows: {
      Shape s = global;
      TESSERA_CHECK(!s.empty() && ctx.vocab_size > 0 && ctx.vocab_size <= s[0], "vocabulary tensor ",
                    shape_string(global), " cannot hold ", ctx.vocab_size, " rows");
      s[0] = ctx.vocab_size;
      return s;
    }
  }
  TESSERA_FAIL("unknown HF layout");
}

void hf_to_tessera(HfLayout layout, const float* hf, const Shape& global, const HfLayoutContext& ctx, float* out) {
  const int64_t n = shape_numel(global);
  switch (layout) {
    case HfLayout::same: std::copy_n(hf, n, out); return;
    case HfLayout::transposed: {
      const int64_t rows = global[0], cols = global[1];  // HF is [cols, rows]
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < rows; ++r) out[r * cols + c] = hf[c * rows + r];
      return;
    }
    case HfLayout::qkv_weight: {
      check_qkv(global, ctx);
      const int64_t rows = global[0], cols = global[1], head_dim = rows / (3 * ctx.num_heads);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t hf_col = hf_qkv_index(r, ctx.num_heads, head_dim);
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = hf[c * rows + hf_col];
      }
      return;
    }
    case HfLayout::qkv_bias: {
      check_qkv(global, ctx);
      const int64_t rows = global[0], head_dim = rows / (3 * ctx.num_heads);
      for (int64_t r = 0; r < rows; ++r) out[r] = hf[hf_qkv_index(r, ctx.num_heads, head_dim)];
      return;
    }
    case HfLayout::vocab_rows: {
      const int64_t real = shape_numel(hf_shape(layout, global, ctx));
      std::copy_n(hf, real, out);
      std::fill(out + real, out + n, 0.0f);
      return;
    }
  }
}

void tessera_to_hf(HfLayout layout, const float* g, const Shape& global, const HfLayoutContext& ctx, float* out) {
  switch (layout) {
    case HfLayout::same: std::copy_n(g, shape_numel(global), out); return;
    case HfLayout::transposed: {
      const int64_t rows = global[0], cols = global[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = g[r * cols + c];
      return;
    }
    case HfLayout::qkv_weight: {
      check_qkv(global, ctx);
      const int64_t rows = global[0], cols = global[1], head_dim = rows / (3 * ctx.num_heads);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t hf_col = hf_qkv_index(r, ctx.num_heads, head_dim);
        for (int64_t c = 0; c < cols; ++c) out[c * rows + hf_col] = g[r * cols + c];
      }
      return;
    }
    case HfLayout::qkv_bias: {
      check_qkv(global, ctx);
      const int64_t rows = global[0], head_dim = rows / (3 * ctx.num_heads);
      for (int64_t r = 0; r < rows; ++r) out[hf_qkv_index(r, ctx.num_heads, head_dim)] = g[r];
      return;
    }
    case HfLayout::vocab_rows: std::copy_n(g, shape_numel(hf_shape(layout, global, ctx)), out); return;
  }
}

}  // namespace tessera::convert
