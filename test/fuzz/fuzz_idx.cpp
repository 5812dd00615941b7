// A Megatron .idx file (with a .bin whose size the first 4 input bytes choose, up to 64 KiB):
// the constructor validates the index; every sequence and document it accepts must be readable.
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "tessera/data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t bin_size = 0;
  std::memcpy(&bin_size, data, 4);
  bin_size %= 65536;
  tessera::fuzz::write_file("data.idx", {reinterpret_cast<const char*>(data) + 4, size - 4});
  tessera::fuzz::write_file("data.bin", std::string(bin_size, '\x01'));
  tessera::fuzz::expect_clean([&] {
    tessera::data::IndexedDataset dataset((tessera::fuzz::scratch() / "data").string());
    for (int64_t i = 0; i < std::min<int64_t>(dataset.sequence_count(), 1000); ++i) (void)dataset.sequence(i);
    for (int64_t d = 0; d < std::min<int64_t>(dataset.document_count(), 1000); ++d) (void)dataset.document(d);
  });
  return 0;
}
