// The checked HDF5 helpers of h5_file.h: handles, attributes and whole-dataset reads and writes.
#include "tessera/ckpt/h5_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "tessera/ckpt/data_checksum.h"
#include "tessera/core/buffer.h"
#include "tessera/runtime/device_copy.h"

namespace tessera::ckpt {

namespace {

herr_t innermost_error(unsigned, const H5E_error2_t* error, void* out) {
  auto* message = static_cast<std::string*>(out);
  if (message->empty() && error && error->desc) *message = std::string(error->func_name) + ": " + error->desc;
  return 0;
}

H5Id string_type() {
  H5Id type(TESSERA_H5_CHECK(H5Tcopy(H5T_C_S1), "string type"));
  TESSERA_H5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE), "string type");
  TESSERA_H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8), "string type");
  return type;
}

H5Id open_attr(hid_t object, const std::string& name) {
  return H5Id(TESSERA_H5_CHECK(H5Aopen(object, name.c_str(), H5P_DEFAULT), "attribute ", name));
}

void write_attr(hid_t object, const std::string& name, hid_t type, hid_t space, const void* data) {
  if (H5Aexists(object, name.c_str()) > 0) TESSERA_H5_CHECK(H5Adelete(object, name.c_str()), "attribute ", name);
  H5Id attr(TESSERA_H5_CHECK(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                             "attribute ", name));
  TESSERA_H5_CHECK(H5Awrite(attr.get(), type, data), "attribute ", name);
}

}  // namespace

hid_t h5_native_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::i64: return H5T_NATIVE_INT64;
    case DType::u8: return H5T_NATIVE_UINT8;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return H5T_NATIVE_UINT16;
  }
  TESSERA_FAIL("no HDF5 type for dtype ", dtype_name(dtype));
}

std::string h5_error_message() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, &message);
  H5Eclear2(H5E_DEFAULT);
  return message.empty() ? "no HDF5 error message" : message;
}

H5Id& H5Id::operator=(H5Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    other.id_ = -1;
  }
  return *this;
}

void H5Id::reset() {
  if (id_ < 0) return;
  switch (H5Iget_type(id_)) {  // close errors during cleanup are not reportable; the id is gone either way
    case H5I_FILE: H5Fclose(id_); break;
    case H5I_GROUP: H5Gclose(id_); break;
    case H5I_DATASET: H5Dclose(id_); break;
    case H5I_DATASPACE: H5Sclose(id_); break;
    case H5I_DATATYPE: H5Tclose(id_); break;
    case H5I_ATTR: H5Aclose(id_); break;
    default: break;
  }
  id_ = -1;
}

void h5_quiet() {
  // No library shutdown at exit: every file is closed explicitly (H5Id), and after a failed write
  // (disk full) HDF5's atexit shutdown flushes the half-closed file again and crashes (exit 139
  // instead of the error's exit 1). Must precede every other HDF5 call, so it is done here, first.
  static const bool no_atexit = [] { return H5dont_atexit() >= 0; }();
  (void)no_atexit;
  TESSERA_H5_CHECK(H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr), "turning off HDF5 error printing");
}

H5Id h5_create_file(const std::string& path) {
  h5_quiet();
  return H5Id(TESSERA_H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "creating ", path));
}

H5Id h5_open_file_read(const std::string& path) {
  h5_quiet();
  return H5Id(TESSERA_H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening ", path));
}

void h5_close_and_sync(H5Id& file, const std::string& path) {
  hid_t id = file.release();  // reset() would swallow a close error; close explicitly instead
  TESSERA_H5_CHECK(H5Fclose(id), "closing ", path);
  int fd = ::open(path.c_str(), O_RDONLY);
  TESSERA_CHECK(fd >= 0, "cannot reopen ", path, " to fsync it");
  int rc = ::fsync(fd);
  ::close(fd);
  TESSERA_CHECK(rc == 0, "fsync of ", path, " failed");
}

H5Id h5_create_group(hid_t parent, const std::string& name) {
  return H5Id(TESSERA_H5_CHECK(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group ",
                               name));
}

H5Id h5_open_group(hid_t parent, const std::string& name) {
  return H5Id(TESSERA_H5_CHECK(H5Gopen2(parent, name.c_str(), H5P_DEFAULT), "group ", name));
}

bool h5_exists(hid_t parent, const std::string& name) {
  return TESSERA_H5_CHECK(H5Lexists(parent, name.c_str(), H5P_DEFAULT), "link ", name) > 0;
}

std::vector<std::string> h5_list(hid_t group) {
  std::vector<std::string> names;
  for (H5Link& link : h5_list_links(group)) names.push_back(std::move(link.name));
  return names;
}

std::vector<H5Link> h5_list_links(hid_t group) {
  std::vector<H5Link> links;
  hsize_t index = 0;
#if H5_VERSION_GE(1, 12, 0)
  // HDF5 1.12 names objects by VOL tokens; the native file format's token is the object's address.
  // (Written against the 1.12 API; the Debian HDF5 this is built and tested with is 1.10.)
  auto collect = [](hid_t location, const char* name, const H5L_info2_t* info, void* out) -> herr_t {
    haddr_t address = HADDR_UNDEF;
    if (info->type == H5L_TYPE_HARD && H5VLnative_token_to_addr(location, info->u.token, &address) < 0)
      address = HADDR_UNDEF;
    static_cast<std::vector<H5Link>*>(out)->push_back({name, address});
    return 0;
  };
  TESSERA_H5_CHECK(H5Literate2(group, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &links), "listing a group");
#else
  auto collect = [](hid_t, const char* name, const H5L_info_t* info, void* out) -> herr_t {
    static_cast<std::vector<H5Link>*>(out)->push_back(
        {name, info->type == H5L_TYPE_HARD ? info->u.address : HADDR_UNDEF});
    return 0;
  };
  TESSERA_H5_CHECK(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &links), "listing a group");
#endif
  return links;
}

void h5_set_attr(hid_t object, const std::string& name, const std::string& value) {
  H5Id type = string_type();
  H5Id space(TESSERA_H5_CHECK(H5Screate(H5S_SCALAR), "attribute ", name));
  const char* data = value.c_str();
  write_attr(object, name, type.get(), space.get(), &data);
}

void h5_set_attr(hid_t object, const std::string& name, int64_t value) {
  H5Id space(TESSERA_H5_CHECK(H5Screate(H5S_SCALAR), "attribute ", name));
  write_attr(object, name, H5T_NATIVE_INT64, space.get(), &value);
}

void h5_set_attr(hid_t object, const std::string& name, double value) {
  H5Id space(TESSERA_H5_CHECK(H5Screate(H5S_SCALAR), "attribute ", name));
  write_attr(object, name, H5T_NATIVE_DOUBLE, space.get(), &value);
}

void h5_set_attr(hid_t object, const std::string& name, const std::vector<int64_t>& value) {
  hsize_t n = value.size();
  H5Id space(n == 0 ? TESSERA_H5_CHECK(H5Screate(H5S_NULL), "attribute ", name)
                    : TESSERA_H5_CHECK(H5Screate_simple(1, &n, nullptr), "attribute ", name));
  write_attr(object, name, H5T_NATIVE_INT64, space.get(), value.data());
}

bool h5_has_attr(hid_t object, const std::string& name) {
  return TESSERA_H5_CHECK(H5Aexists(object, name.c_str()), "attribute ", name) > 0;
}

std::string h5_attr_string(hid_t object, const std::string& name) {
  H5Id attr = open_attr(object, name);
  H5Id type = string_type();
  char* data = nullptr;
  TESSERA_H5_CHECK(H5Aread(attr.get(), type.get(), &data), "attribute ", name);
  std::string value = data ? data : "";
  H5free_memory(data);
  return value;
}

int64_t h5_attr_int(hid_t object, const std::string& name) {
  H5Id attr = open_attr(object, name);
  int64_t value = 0;
  TESSERA_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &value), "attribute ", name);
  return value;
}

double h5_attr_double(hid_t object, const std::string& name) {
  H5Id attr = open_attr(object, name);
  double value = 0;
  TESSERA_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value), "attribute ", name);
  return value;
}

std::vector<int64_t> h5_attr_ints(hid_t object, const std::string& name) {
  H5Id attr = open_attr(object, name);
  H5Id space(TESSERA_H5_CHECK(H5Aget_space(attr.get()), "attribute ", name));
  hssize_t n = TESSERA_H5_CHECK(H5Sget_simple_extent_npoints(space.get()), "attribute ", name);
  std::vector<int64_t> value(static_cast<size_t>(n));
  if (n > 0) TESSERA_H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, value.data()), "attribute ", name);
  return value;
}

void h5_write_tensor(hid_t parent, const std::string& name, const Tensor& device_tensor) {
  Buffer staged(device_tensor.device().is_cpu() ? 0 : device_tensor.nbytes());  // a GPU tensor is written from a host copy
  const Tensor tensor = device_tensor.device().is_cpu() ? device_tensor : staged.as_tensor(device_tensor.dtype(), device_tensor.shape());
  if (!device_tensor.device().is_cpu()) copy_synchronous(device_tensor, tensor);
  std::vector<hsize_t> dims(tensor.shape().begin(), tensor.shape().end());
  H5Id space(dims.empty() ? TESSERA_H5_CHECK(H5Screate(H5S_SCALAR), "dataset ", name)
                          : TESSERA_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                             "dataset ", name));
  hid_t type = h5_native_type(tensor.dtype());
  H5Id dataset(TESSERA_H5_CHECK(H5Dcreate2(parent, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                           H5P_DEFAULT),
                                "dataset ", name));
  if (tensor.numel() > 0)
    TESSERA_H5_CHECK(H5Dwrite(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, tensor.data()), "dataset ", name);
  h5_set_attr(dataset.get(), "dtype", std::string(dtype_name(tensor.dtype())));
  const uint64_t checksum =
      data_checksum_blocks(tensor.data(), static_cast<size_t>(tensor.numel()) * dtype_size(tensor.dtype()));
  h5_set_attr(dataset.get(), "checksum8", static_cast<int64_t>(checksum));
}

void h5_verify_checksum(hid_t dataset, const void* data, size_t bytes) {
  const bool lanes = h5_has_attr(dataset, "checksum8");
  if (!lanes && !h5_has_attr(dataset, "checksum")) return;  // written before checksums existed
  const uint64_t stored = static_cast<uint64_t>(h5_attr_int(dataset, lanes ? "checksum8" : "checksum"));
  const uint64_t actual = lanes ? data_checksum_blocks(data, bytes) : data_checksum(data, bytes);
  if (stored != actual)
    TESSERA_FAIL("the data does not match its checksum (stored ", stored, ", computed ", actual,
                 "): the file was modified or damaged after it was written");
}

void h5_write_string(hid_t parent, const std::string& name, const std::string& value) {
  H5Id type = string_type();
  H5Id space(TESSERA_H5_CHECK(H5Screate(H5S_SCALAR), "dataset ", name));
  H5Id dataset(TESSERA_H5_CHECK(H5Dcreate2(parent, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                           H5P_DEFAULT),
                                "dataset ", name));
  const char* data = value.c_str();
  TESSERA_H5_CHECK(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &data), "dataset ", name);
}

std::string h5_read_string(hid_t parent, const std::string& name) {
  H5Id dataset(TESSERA_H5_CHECK(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), "dataset ", name));
  H5Id type = string_type();
  char* data = nullptr;
  TESSERA_H5_CHECK(H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &data), "dataset ", name);
  std::string value = data ? data : "";
  H5free_memory(data);
  return value;
}

DType h5_dataset_dtype(hid_t dataset) {
  std::string name = h5_attr_string(dataset, "dtype");
  for (DType d : kStoredDtypes)
    if (name == dtype_name(d)) return d;
  TESSERA_FAIL("checkpoint dataset has unknown dtype attribute '", name, "'");
}

Shape h5_dataset_shape(hid_t dataset) {
  H5Id space(TESSERA_H5_CHECK(H5Dget_space(dataset), "dataset space"));
  int rank = TESSERA_H5_CHECK(H5Sget_simple_extent_ndims(space.get()), "dataset rank");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) TESSERA_H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "dataset dims");
  return Shape(dims.begin(), dims.end());
}

void h5_read_into(hid_t dataset, DType dtype, void* out) {
  TESSERA_H5_CHECK(H5Dread(dataset, h5_native_type(dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, out), "reading a dataset");
}

}  // namespace tessera::ckpt
