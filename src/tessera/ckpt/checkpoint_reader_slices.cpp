// CheckpointReader::read_slices: loading by slices. For each saved shard (the pieces sharing a
// split offset) that overlaps the target's local shard along the split axis, the shard's bytes are
// read once (flat distributed-optimizer slices concatenated) and the overlapping rows are copied
// into the destination with the dtype converted in blocks. The same layout reads each dataset
// straight into the destination; nothing goes through a global tensor or doubles.
#include <algorithm>
#include <cstring>
#include <set>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/h5_verified_read.h"
#include "tessera/core/buffer.h"
#include "tessera/core/half.h"

namespace tessera::ckpt {

namespace {

// Converts n elements from src (dtype s) to dst (dtype d) in blocks through a small float buffer.
void convert_copy(const void* src, DType s, void* dst, DType d, int64_t n) {
  if (s == d) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(s));
    return;
  }
  if (s == DType::f64 || d == DType::f64) {
    for (int64_t i = 0; i < n; ++i) {
      double v = s == DType::f64   ? static_cast<const double*>(src)[i]
                 : s == DType::f32 ? static_cast<const float*>(src)[i]
                 : s == DType::bf16 ? bf16_to_float(static_cast<const bf16*>(src)[i])
                                    : f16_to_float(static_cast<const f16*>(src)[i]);
      if (d == DType::f64) static_cast<double*>(dst)[i] = v;
      else if (d == DType::f32) static_cast<float*>(dst)[i] = static_cast<float>(v);
      else if (d == DType::bf16) static_cast<bf16*>(dst)[i] = float_to_bf16(static_cast<float>(v));
      else static_cast<f16*>(dst)[i] = float_to_f16(static_cast<float>(v));
    }
    return;
  }
  constexpr int64_t kBlock = 4096;
  float block[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    const float* f = block;
    switch (s) {
      case DType::f32: f = static_cast<const float*>(src) + start; break;
      case DType::bf16:
        for (int64_t i = 0; i < m; ++i) block[i] = bf16_to_float(static_cast<const bf16*>(src)[start + i]);
        break;
      case DType::f16:
        for (int64_t i = 0; i < m; ++i) block[i] = f16_to_float(static_cast<const f16*>(src)[start + i]);
        break;
      default: TESSERA_FAIL("checkpoint tensors must be floating point, got ", dtype_name(s));
    }
    switch (d) {
      case DType::f32: std::memcpy(static_cast<float*>(dst) + start, f, static_cast<size_t>(m) * sizeof(float)); break;
      case DType::bf16:
        for (int64_t i = 0; i < m; ++i) static_cast<bf16*>(dst)[start + i] = float_to_bf16(f[i]);
        break;
      case DType::f16:
        for (int64_t i = 0; i < m; ++i) static_cast<f16*>(dst)[start + i] = float_to_f16(f[i]);
        break;
      default: TESSERA_FAIL("cannot load a checkpoint tensor into dtype ", dtype_name(d));
    }
  }
}

int64_t product(const Shape& shape, int begin, int end) {
  int64_t p = 1;
  for (int i = begin; i < end; ++i) p *= shape[i];
  return p;
}

}  // namespace

void CheckpointReader::read_piece(const Piece& p, void* dst) const {
  const std::string file = (folder_ / file_names_[p.file]).string();
  const size_t bytes = static_cast<size_t>(p.count) * dtype_size(p.dtype);
  try {
    if (p.data_offset >= 0) {
      try {
        return read_verified_at(descriptors_[p.file], p.data_offset, dst, bytes, p.checksum8);
      } catch (const Error&) {
        if (!p.indexed) throw;  // a stale piece index: read the dataset as HDF5 describes it now
      }
    }
    H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(files_[p.file]->get(), p.path.c_str(), H5P_DEFAULT), p.path));
    const int64_t stored = shape_numel(h5_dataset_shape(dataset.get()));  // (checked at open unless indexed)
    TESSERA_CHECK(stored == p.count, "it holds ", stored, " elements, its piece index says ", p.count);
    h5_read_verified(files_[p.file]->get(), dataset.get(), p.dtype, dst, bytes);
  } catch (const Error& e) {
    TESSERA_FAIL("checkpoint file ", file, " cannot be read at ", p.path, " (truncated or corrupt?): ", e.message());
  }
}

void CheckpointReader::check_stored_data_backs(const std::string& kind, const std::string& name,
                                               const std::vector<Piece>& pieces) const {
  // The shapes come from attributes: before anything is allocated by them, the stored data (each
  // piece's count matches its dataset, see index_group) must make up every saved shard, and the
  // shards the whole global tensor, so a damaged shape is an Error, not a huge allocation (found by
  // test/fuzz/fuzz_checkpoint_attrs: a 567 GB one).
  const Shape& global_s = pieces.front().global_shape;
  const int axis_s = pieces.front().split_axis;
  std::map<int64_t, std::vector<const Piece*>> shards;  // split offset -> flat slices of that saved shard
  for (const Piece& p : pieces) shards[axis_s >= 0 ? p.split_offset : 0].push_back(&p);
  int64_t along_axis = 0;
  for (const auto& [offset, slices] : shards) {
    std::set<int64_t> seen;
    int64_t stored = 0;
    for (const Piece* p : slices)
      if (seen.insert(p->flat_offset).second) stored += p->count;
    const Shape& local_s = slices.front()->local_shape;
    TESSERA_CHECK(stored == shape_numel(local_s) && (axis_s >= 0 || local_s == global_s), "checkpoint ",
                  folder_.string(), ": ", kind, " of '", name, "' (shard at offset ", offset, ") stores ", stored,
                  " elements for local shape ", shape_string(local_s), " and global shape ", shape_string(global_s),
                  " (a file is missing or corrupt)");
    if (axis_s >= 0) along_axis += local_s[static_cast<size_t>(axis_s)];
  }
  if (axis_s >= 0)
    TESSERA_CHECK(along_axis == global_s[static_cast<size_t>(axis_s)], "checkpoint ", folder_.string(),
                  ": the shards of ", kind, " '", name, "' cover ", along_axis, " of ",
                  global_s[static_cast<size_t>(axis_s)], " along axis ", axis_s, "; a model shard file is missing");
}

void CheckpointReader::read_slices(const std::string& kind, const std::string& name, const TensorShard& target,
                                   int64_t flat_offset, int64_t count, void* out, DType out_dtype) const {
  auto it = pieces_.find({kind, name});
  TESSERA_CHECK(it != pieces_.end(), "checkpoint ", folder_.string(), " has no ", kind, " for tensor '", name, "'");
  const std::vector<Piece>& pieces = it->second;
  const Shape& local_t = target.local.shape();
  const Shape global_t = target.split_axis < 0 ? local_t : target.global_shape;
  const int64_t numel_t = shape_numel(local_t);
  TESSERA_CHECK(flat_offset >= 0 && count >= 0 && flat_offset + count <= numel_t, "slice [", flat_offset, ", +", count,
                ") of ", name, " exceeds its ", numel_t, " local elements");

  // Same layout: one saved piece holds exactly these elements.
  for (const Piece& p : pieces)
    if (p.dtype == out_dtype && p.global_shape == global_t && p.split_axis == target.split_axis &&
        p.split_offset == target.split_offset && p.local_shape == local_t && p.flat_offset == flat_offset &&
        p.count == count)
      return read_piece(p, out);

  const Shape& global_s = pieces.front().global_shape;
  const int axis_s = pieces.front().split_axis;
  for (const Piece& p : pieces)
    TESSERA_CHECK(p.global_shape == global_s && p.split_axis == axis_s, "checkpoint ", folder_.string(), ": ", kind,
                  " '", name, "' has inconsistent layouts across files (global ", shape_string(p.global_shape),
                  " axis ", p.split_axis, " in ", file_names_[p.file], ")");
  check_stored_data_backs(kind, name, pieces);
  // The saved global shape must equal the target's, except the rows of vocabulary tensors (another
  // padding): the common rows are copied, the rest zero-filled.
  bool shapes_ok = global_s.size() == global_t.size();
  for (size_t i = 0; shapes_ok && i < global_s.size(); ++i)
    shapes_ok = global_s[i] == global_t[i] || (static_cast<int>(i) == target.vocab_axis);
  if (!shapes_ok)
    TESSERA_FAIL("checkpoint tensor '", name, "' in ", (folder_ / file_names_[pieces.front().file]).string(),
                 " has global shape ", shape_string(global_s), " but this model needs ", shape_string(global_t), " (",
                 target.name, "); was it saved with another model configuration?");
  // The axis both are cut along (0 when neither is split: only the vocabulary rows may differ).
  int axis = target.split_axis >= 0 ? target.split_axis : std::max(axis_s, 0);
  if (axis_s >= 0 && target.split_axis >= 0 && axis_s != target.split_axis)
    TESSERA_FAIL("checkpoint tensor '", name, "' is split along axis ", axis_s, " but this model splits it along ",
                 target.split_axis);
  const bool rank0 = global_t.empty();
  if (rank0) axis = 0;
  const int64_t outer = rank0 ? 1 : product(global_t, 0, axis);
  const int64_t inner = rank0 ? 1 : product(global_t, axis + 1, static_cast<int>(global_t.size()));
  const int64_t off_t = target.split_axis >= 0 ? target.split_offset : 0;
  const int64_t len_t = rank0 ? 1 : local_t[axis];

  // The whole target shard is assembled in out's dtype unless `out` is exactly that shard.
  const bool whole = flat_offset == 0 && count == numel_t;
  if (!whole && assembled_.size() < static_cast<size_t>(numel_t) * dtype_size(out_dtype))
    assembled_.resize(static_cast<size_t>(numel_t) * dtype_size(out_dtype));
  void* shard = whole ? out : assembled_.data();
  const size_t out_elem = dtype_size(out_dtype);
  const int64_t rows_common = rank0 ? 1 : std::min(global_s[axis], global_t[axis]);
  if (!rank0 && global_t[axis] > global_s[axis]) std::memset(shard, 0, static_cast<size_t>(numel_t) * out_elem);

  std::map<int64_t, std::vector<const Piece*>> shards;  // split offset -> flat slices of that saved shard
  for (const Piece& p : pieces) shards[axis_s >= 0 ? p.split_offset : 0].push_back(&p);
  int64_t covered = 0;
  for (const auto& [off_s, slices] : shards) {
    const Shape& local_s = slices.front()->local_shape;
    const int64_t len_s = rank0 ? 1 : local_s[axis];
    const int64_t lo = std::max(off_s, off_t), hi = std::min({off_s + len_s, off_t + len_t, rows_common});
    if (hi <= lo) continue;  // this saved shard holds none of the target's elements
    const DType dtype_s = slices.front()->dtype;
    const int64_t numel_s = shape_numel(local_s);
    if (staging_.size() < static_cast<size_t>(numel_s) * dtype_size(dtype_s))
      staging_.resize(static_cast<size_t>(numel_s) * dtype_size(dtype_s));
    std::set<int64_t> seen;  // replicated copies (unsplit tensors on every TP rank) are read once
    int64_t read = 0;
    for (const Piece* p : slices) {
      if (!seen.insert(p->flat_offset).second) continue;
      TESSERA_CHECK(p->dtype == dtype_s && p->flat_offset + p->count <= numel_s, "slice of ", name, " in ",
                    file_names_[p->file], " does not fit its shard");
      read_piece(*p, static_cast<char*>(staging_.data()) + p->flat_offset * dtype_size(dtype_s));
      read += p->count;
    }
    TESSERA_CHECK(read == numel_s, "checkpoint ", folder_.string(), ": ", kind, " of '", name, "' (shard at offset ",
                  off_s, ") covers ", read, " of ", numel_s, " elements; a distributed-optimizer file is missing");
    for (int64_t o = 0; o < outer; ++o)
      convert_copy(static_cast<const char*>(staging_.data()) + ((o * len_s + lo - off_s) * inner) * dtype_size(dtype_s),
                   dtype_s, static_cast<char*>(shard) + ((o * len_t + lo - off_t) * inner) * out_elem, out_dtype,
                   (hi - lo) * inner);
    covered += hi - lo;
  }
  const int64_t wanted = std::max<int64_t>(0, std::min(off_t + len_t, rows_common) - off_t);
  TESSERA_CHECK(covered == wanted, "checkpoint ", folder_.string(), ": the shards of ", kind, " '", name, "' cover ",
                covered, " of the ", wanted, " rows this rank needs along axis ", axis, "; a model shard file is missing");
  if (!whole)
    std::memcpy(out, static_cast<const char*>(shard) + flat_offset * out_elem, static_cast<size_t>(count) * out_elem);
}

}  // namespace tessera::ckpt
