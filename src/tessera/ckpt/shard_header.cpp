#include "tessera/ckpt/shard_header.h"

#include "tessera/ckpt/h5_file.h"
#include "tessera/core/error.h"

namespace tessera::ckpt {

void write_shard_header(hid_t file, int64_t iteration, const ShardCoordinates& c, const std::string& params_dtype,
                        bool distributed_optimizer) {
  h5_set_attr(file, "format", std::string("tessera-checkpoint"));
  h5_set_attr(file, "format_version", kShardFormatVersion);
  h5_set_attr(file, "checkpoint_version", 3.0);  // Megatron's legacy checkpoint version, for orientation
  h5_set_attr(file, "tessera_version", std::string(TESSERA_VERSION));
  unsigned major = 0, minor = 0, release = 0;
  TESSERA_H5_CHECK(H5get_libversion(&major, &minor, &release), "HDF5 version");
  h5_set_attr(file, "hdf5_version", std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release));
  h5_set_attr(file, "iteration", iteration);
  h5_set_attr(file, "tp_rank", int64_t{c.tp_rank});
  h5_set_attr(file, "tp_size", int64_t{c.tp_size});
  h5_set_attr(file, "pp_rank", int64_t{c.pp_rank});
  h5_set_attr(file, "pp_size", int64_t{c.pp_size});
  h5_set_attr(file, "ep_rank", int64_t{c.ep_rank});
  h5_set_attr(file, "ep_size", int64_t{c.ep_size});
  h5_set_attr(file, "dp_rank", int64_t{c.dp_rank});
  h5_set_attr(file, "dp_size", int64_t{c.dp_size});
  h5_set_attr(file, "world_size", int64_t{c.world_size});
  h5_set_attr(file, "params_dtype", params_dtype);
  h5_set_attr(file, "distributed_optimizer", int64_t{distributed_optimizer ? 1 : 0});
}

}  // namespace tessera::ckpt
