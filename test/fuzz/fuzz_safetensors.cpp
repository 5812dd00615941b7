// A .safetensors file (8-byte header length, JSON header, data): open() validates the header; every
// tensor it then lists must be readable.
#include "fuzz_util.h"
#include "tessera/ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = tessera::fuzz::write_file("model.safetensors", {reinterpret_cast<const char*>(data), size});
  tessera::fuzz::expect_clean([&] {
    auto file = tessera::ckpt::SafetensorsFile::open(path);
    for (const auto& name : file.names()) {
      (void)file.raw(name);
      const auto& dtype = file.info(name).dtype;
      if (dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64") (void)file.read_as_f32(name);
    }
  });
  return 0;
}
