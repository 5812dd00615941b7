// TFRecord framing, as TensorFlow's record_writer and TensorBoard's readers use it:
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 over CRC-32C (Castagnoli).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::train::tensorboard {

uint32_t crc32c(std::string_view data);  // CRC-32C (polynomial 0x82F63B78 reflected), "123456789" -> 0xE3069283
uint32_t masked_crc32c(std::string_view data);
std::string tfrecord(std::string_view data);  // one framed record

}  // namespace tessera::train::tensorboard
