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

// Fused layouts: the HF-order row of Tessera row r (rows in all), or -1 for other layouts.
int64_t fused_hf_row(HfLayout layout, int64_t r, int64_t rows, const HfLayoutContext& ctx) {
  if (layout == HfLayout::swiglu_rows) return (r % 2 == 0 ? 0 : rows / 2) + r / 2;
  const int64_t groups = ctx.num_query_groups > 0 ? ctx.num_query_groups : ctx.num_heads;
  const int64_t hpg = ctx.num_heads / groups, d = rows / (ctx.num_heads + 2 * groups);
  const int64_t group = r / ((hpg + 2) * d), within = r % ((hpg + 2) * d), slot = within / d, dd = within % d;
  if (slot < hpg) return (group * hpg + slot) * d + dd;
  if (slot == hpg) return ctx.num_heads * d + group * d + dd;
  return (ctx.num_heads + groups) * d + group * d + dd;
}

void check_fused(HfLayout layout, const Shape& global, const HfLayoutContext& ctx) {
  TESSERA_CHECK(!global.empty() && global.size() <= 2, "fused tensor of shape ", shape_string(global),
                " must be 1-D or 2-D");
  if (layout == HfLayout::swiglu_rows) {
    TESSERA_CHECK(global[0] % 2 == 0, "SwiGLU tensor of shape ", shape_string(global), " has an odd row count");
    return;
  }
  const int64_t groups = ctx.num_query_groups > 0 ? ctx.num_query_groups : ctx.num_heads;
  TESSERA_CHECK(ctx.num_heads > 0 && ctx.num_heads % groups == 0 && global[0] % (ctx.num_heads + 2 * groups) == 0,
                "QKV tensor of shape ", shape_string(global), " does not split into ", ctx.num_heads, " + 2 x ",
                groups, " heads");
}

// Moves rows between Tessera order (to_hf) and HF order for the fused layouts.
void permute_fused_rows(HfLayout layout, const float* in, const Shape& global, const HfLayoutContext& ctx, float* out,
                        bool to_hf) {
  check_fused(layout, global, ctx);
  const int64_t rows = global[0], cols = global.size() == 2 ? global[1] : 1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = fused_hf_row(layout, r, rows, ctx);
    if (to_hf) std::copy_n(in + r * cols, cols, out + h * cols);
    else std::copy_n(in + h * cols, cols, out + r * cols);
  }
}

}  // namespace

Shape hf_part_shape(const models::HfTensorName& n, const Shape& global, const HfLayoutContext& ctx) {
  Shape s = hf_shape(n.layout, global, ctx);
  if (n.rows > 0) {
    TESSERA_CHECK(!s.empty() && n.row_begin >= 0 && n.row_begin + n.rows <= s[0], "HF tensor '", n.hf, "' rows [",
                  n.row_begin, ", ", n.row_begin + n.rows, ") outside the fused tensor ", shape_string(s));
    s[0] = n.rows;
  }
  return s;
}

Shape hf_shape(HfLayout layout, const Shape& global, const HfLayoutContext& ctx) {
  switch (layout) {
    case HfLayout::same:
    case HfLayout::qkv_bias:
    case HfLayout::gqa_qkv_rows:
    case HfLayout::swiglu_rows: return global;
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
    case HfLayout::gqa_qkv_rows:
    case HfLayout::swiglu_rows: permute_fused_rows(layout, hf, global, ctx, out, false); return;
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
    case HfLayout::gqa_qkv_rows:
    case HfLayout::swiglu_rows: permute_fused_rows(layout, g, global, ctx, out, true); return;
  }
}

}  // namespace tessera::convert
