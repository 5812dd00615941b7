// Thin checked layer over the serial HDF5 C API for checkpoints: TESSERA_H5_CHECK (every call checked,
// the HDF5 error stack's message in the Error), an owning handle, and typed attribute/dataset helpers.
#pragma once
#include <hdf5.h>

#include <array>
#include <string>
#include <vector>

#include "tessera/ckpt/data_checksum.h"
#include "tessera/core/tensor.h"

namespace tessera::ckpt {

// The innermost message of the current HDF5 error stack ("" when empty); clears the stack.
std::string h5_error_message();

}  // namespace tessera::ckpt

// HDF5 calls return a negative value on failure.
#define TESSERA_H5_CHECK(call, ...)                                                                        \
  ([&]() {                                                                                                 \
    auto h5_result_ = (call);                                                                              \
    if (h5_result_ < 0)                                                                                    \
      TESSERA_FAIL("HDF5 call failed: " #call ": ", ::tessera::ckpt::h5_error_message(), " (", __VA_ARGS__, \
                   ")");                                                                                   \
    return h5_result_;                                                                                     \
  }())

namespace tessera::ckpt {

// Owns one HDF5 identifier (file, group, dataset, dataspace, datatype or attribute) and closes it
// with the matching H5*close.
class H5Id {
 public:
  H5Id() = default;
  explicit H5Id(hid_t id) : id_(id) {}
  ~H5Id() { reset(); }
  H5Id(H5Id&& other) noexcept : id_(other.id_) { other.id_ = -1; }
  H5Id& operator=(H5Id&& other) noexcept;
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  hid_t get() const { return id_; }
  hid_t release() {  // gives up ownership without closing
    hid_t id = id_;
    id_ = -1;
    return id;
  }
  void reset();

 private:
  hid_t id_ = -1;
};

// Call once before any other HDF5 use: turns off HDF5's automatic error printing (errors are
// reported through TESSERA_H5_CHECK instead).
void h5_quiet();

H5Id h5_create_file(const std::string& path);     // truncates
H5Id h5_open_file_read(const std::string& path);  // read-only
void h5_close_and_sync(H5Id& file, const std::string& path);  // H5Fclose, then fsync the file
H5Id h5_create_group(hid_t parent, const std::string& name);
H5Id h5_open_group(hid_t parent, const std::string& name);
bool h5_exists(hid_t parent, const std::string& name);
std::vector<std::string> h5_list(hid_t group);  // link names, in creation/name order
struct H5Link {
  std::string name;
  haddr_t address = HADDR_UNDEF;  // the object a hard link points to (HADDR_UNDEF: another link type)
};
std::vector<H5Link> h5_list_links(hid_t group);  // as h5_list, with each link's object address

// Attributes on any object.
void h5_set_attr(hid_t object, const std::string& name, const std::string& value);
void h5_set_attr(hid_t object, const std::string& name, int64_t value);
void h5_set_attr(hid_t object, const std::string& name, double value);
void h5_set_attr(hid_t object, const std::string& name, const std::vector<int64_t>& value);
bool h5_has_attr(hid_t object, const std::string& name);
std::string h5_attr_string(hid_t object, const std::string& name);
int64_t h5_attr_int(hid_t object, const std::string& name);
double h5_attr_double(hid_t object, const std::string& name);
std::vector<int64_t> h5_attr_ints(hid_t object, const std::string& name);

// Datasets. A tensor is stored with its element type: f32 -> float, f64 -> double, i32/i64/u8/u16 as
// such, bf16 and f16 as uint16 with attribute dtype = "bf16" / "f16" (every dataset carries dtype).
void h5_write_tensor(hid_t parent, const std::string& name, const Tensor& tensor);
void h5_write_string(hid_t parent, const std::string& name, const std::string& value);  // scalar string
std::string h5_read_string(hid_t parent, const std::string& name);
// The dtypes a checkpoint dataset may hold; their order is also the piece index's dtype code
// (piece_index.h), so it only ever grows at the end.
inline constexpr std::array<DType, 8> kStoredDtypes = {DType::f32, DType::bf16, DType::f16, DType::i32,
                                                       DType::i64, DType::u16,  DType::u8,  DType::f64};
DType h5_dataset_dtype(hid_t dataset);       // from the dtype attribute (one of kStoredDtypes)
Shape h5_dataset_shape(hid_t dataset);
void h5_read_into(hid_t dataset, DType dtype, void* out);  // whole dataset, stored element type
hid_t h5_native_type(DType dtype);  // the HDF5 type a dtype is stored as (bf16, f16: uint16)

// The checksums of a dataset's bytes are in data_checksum.h. h5_write_tensor stores the lane checksum
// as attribute "checksum8" (int64 bit pattern); h5_verify_checksum checks "checksum8", or "checksum"
// (data_checksum) in files written before it, and fails when the bytes read do not match.
void h5_verify_checksum(hid_t dataset, const void* data, size_t bytes);

}  // namespace tessera::ckpt
