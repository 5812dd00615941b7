// HDF5 checkpoint attributes through the loader: a tiny model's checkpoint is saved once; each
// input is a list of (selector byte, 8-byte value) edits of its attributes (header sizes and ranks,
// tensor layouts, optimizer slices, progress), then the trainer loads it. Damaged values must be
// rejected with an Error, never trusted into a crash. (HDF5's own file format parser is not the
// target: the bytes of the files stay valid HDF5.)
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "fuzz_util.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/trainer.h"

namespace {

namespace fs = std::filesystem;

tessera::train::Config config(const std::string& key, const std::string& dir) {
  return tessera::train::load_config(
      "", {"data.mock_data=true", "data.vocab_size=40", "model.num_layers=1", "model.hidden_size=16",
           "model.num_attention_heads=2", "model.seq_length=8", "training.micro_batch_size=2",
           "training.global_batch_size=4", "training.train_iters=2", "training.eval_interval=0",
           "optimizer.lr_warmup_iters=1", "logging.log_interval=100", "training.exit_signal_handler=false",
           key + "=" + dir});
}

struct Target {
  const char* file;
  const char* object;
  const char* attribute;
};
const Target kTargets[] = {
    {"mp_rank_00_000.h5", "/", "tp_size"},
    {"mp_rank_00_000.h5", "/", "pp_size"},
    {"mp_rank_00_000.h5", "/", "ep_size"},
    {"mp_rank_00_000.h5", "/", "dp_size"},
    {"mp_rank_00_000.h5", "/", "world_size"},
    {"mp_rank_00_000.h5", "/", "tp_rank"},
    {"mp_rank_00_000.h5", "/", "iteration"},
    {"mp_rank_00_000.h5", "/", "format_version"},
    {"mp_rank_00_000.h5", "/model/embedding.word_embeddings.weight", "split_axis"},
    {"mp_rank_00_000.h5", "/model/embedding.word_embeddings.weight", "split_offset"},
    {"mp_rank_00_000.h5", "/model/embedding.word_embeddings.weight", "global_shape"},
    {"mp_rank_00_000.h5", "/model/embedding.word_embeddings.weight", "local_shape"},
    {"mp_rank_00_000.h5", "/model/decoder.layers.0.mlp.linear_fc1.weight", "split_axis"},
    {"mp_rank_00_000.h5", "/model/decoder.layers.0.mlp.linear_fc1.weight", "global_shape"},
    {"mp_rank_00_000.h5", "/model/decoder.layers.0.mlp.linear_fc1.weight", "local_shape"},
    {"mp_rank_00_000.h5", "/model/decoder.layers.0.mlp.linear_fc1.weight", "checksum8"},
    {"mp_rank_00_000.h5", "/optimizer/exp_avg/decoder.layers.0.mlp.linear_fc1.weight", "flat_offset"},
    {"mp_rank_00_000.h5", "/optimizer/exp_avg/decoder.layers.0.mlp.linear_fc1.weight", "count"},
    {"mp_rank_00_000.h5", "/optimizer/exp_avg/decoder.layers.0.mlp.linear_fc1.weight", "global_shape"},
    {"mp_rank_00_000.h5", "/optimizer", "step"},
    // The groups' piece index (ckpt/piece_index.h): its words edited, or the index deleted so that
    // the edits of the datasets' own attributes above are what the reader reads.
    {"mp_rank_00_000.h5", "/model", "piece_index"},
    {"mp_rank_00_000.h5", "/optimizer/exp_avg", "piece_index"},
    {"mp_rank_00_000.h5", "/model", "-piece_index"},
    {"mp_rank_00_000.h5", "/optimizer/exp_avg", "-piece_index"},
    {"common.h5", "/", "tp_size"},
    {"common.h5", "/", "world_size"},
    {"common.h5", "/progress", "iteration"},
    {"common.h5", "/progress", "fields_checksum"},
    {"common.h5", "/optimizer", "distributed"},
    {"common.h5", "/model_info", "hidden_size"},
};

// Sets element (value >> 56) of the int64 attribute to value (an attribute that is not int64 is left);
// an attribute name "-NAME" deletes NAME.
void edit(const fs::path& folder, const Target& t, int64_t value) {
  hid_t file = H5Fopen((folder / t.file).c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return;
  hid_t object = H5Oopen(file, t.object, H5P_DEFAULT);
  if (object >= 0 && t.attribute[0] == '-') {
    if (H5Aexists(object, t.attribute + 1) > 0) H5Adelete(object, t.attribute + 1);
  } else if (object >= 0) {
    hid_t attr = H5Aopen(object, t.attribute, H5P_DEFAULT);
    if (attr >= 0) {
      hid_t space = H5Aget_space(attr);
      hssize_t n = H5Sget_simple_extent_npoints(space);
      hid_t type = H5Aget_type(attr);
      if (n > 0 && n < 4096 && H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 8) {
        std::vector<int64_t> values(static_cast<size_t>(n));
        if (H5Aread(attr, H5T_NATIVE_INT64, values.data()) >= 0) {
          values[static_cast<size_t>((static_cast<uint64_t>(value) >> 56) % static_cast<uint64_t>(n))] = value;
          H5Awrite(attr, H5T_NATIVE_INT64, values.data());
        }
      }
      H5Tclose(type);
      H5Sclose(space);
      H5Aclose(attr);
    }
  }
  if (object >= 0) H5Oclose(object);
  H5Fclose(file);
}

const fs::path& good() {
  static const fs::path dir = tessera::fuzz::scratch() / "good";
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  tessera::Runtime::init(argc, argv);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  fs::remove_all(good());
  tessera::train::Trainer(config("checkpoint.save", good().string()), tessera::Device::cpu()).train();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path copy = tessera::fuzz::scratch() / "case";
  fs::remove_all(copy);
  fs::copy(good(), copy, fs::copy_options::recursive);
  const fs::path folder = copy / "iter_0000002";
  for (size_t i = 0; i + 9 <= size && i < 9 * 8; i += 9) {
    int64_t value = 0;
    std::memcpy(&value, data + i + 1, 8);
    edit(folder, kTargets[data[i] % (sizeof kTargets / sizeof kTargets[0])], value);
  }
  tessera::fuzz::expect_clean([&] {
    tessera::train::Trainer trainer(config("checkpoint.load", copy.string()), tessera::Device::cpu());
  });
  return 0;
}
