// CRC-32 (IEEE 802.3, the zlib polynomial) for file integrity checks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ladder {

// Continues a CRC over `size` more bytes; start with crc = 0.
uint32_t Crc32(uint32_t crc, const void* data, size_t size);

}  // namespace ladder
