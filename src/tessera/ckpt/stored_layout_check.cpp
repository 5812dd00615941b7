#include "tessera/ckpt/stored_layout_check.h"

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace {
constexpr int64_t kMaxElements = int64_t{1} << 48;

int64_t checked_numel(const std::string& where, const char* what, const Shape& shape) {
  __int128 n = 1;
  for (int64_t d : shape) {
    if (d < 0) TESSERA_FAIL(where, ": ", what, " ", shape_string(shape), " has a negative dimension (corrupt?)");
    n *= d;
    if (n > kMaxElements) TESSERA_FAIL(where, ": ", what, " ", shape_string(shape), " is implausibly large (corrupt?)");
  }
  return static_cast<int64_t>(n);
}
}  // namespace

void check_stored_layout(const std::string& where, const Shape& global_shape, const Shape& local_shape,
                         int64_t split_axis, int64_t split_offset, int64_t flat_offset, int64_t count) {
  checked_numel(where, "global_shape", global_shape);
  const int64_t local_numel = checked_numel(where, "local_shape", local_shape);
  const auto ndim = static_cast<int64_t>(global_shape.size());
  if (split_axis < -1 || split_axis >= std::max<int64_t>(ndim, 0) || (split_axis >= 0 && local_shape.size() != global_shape.size()))
    TESSERA_FAIL(where, ": split_axis ", split_axis, " does not fit global_shape ", shape_string(global_shape),
                 " and local_shape ", shape_string(local_shape), " (corrupt?)");
  if (split_axis >= 0) {
    for (int64_t i = 0; i < ndim; ++i)
      if (i != split_axis && local_shape[static_cast<size_t>(i)] != global_shape[static_cast<size_t>(i)])
        TESSERA_FAIL(where, ": local_shape ", shape_string(local_shape), " differs from global_shape ",
                     shape_string(global_shape), " outside split_axis ", split_axis, " (corrupt?)");
    const int64_t l = local_shape[static_cast<size_t>(split_axis)], g = global_shape[static_cast<size_t>(split_axis)];
    if (split_offset < 0 || split_offset > g - l)
      TESSERA_FAIL(where, ": split_offset ", split_offset, " with ", l, " of ", g, " rows along axis ", split_axis,
                   " lies outside the tensor (corrupt?)");
  }
  if (flat_offset < 0 || count < 0 || flat_offset > local_numel - count)
    TESSERA_FAIL(where, ": slice [", flat_offset, ", +", count, ") lies outside its ", local_numel,
                 " local elements (corrupt?)");
}

}  // namespace tessera::ckpt
