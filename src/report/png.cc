// A PNG is the 8-byte signature and chunks (length, type, data, CRC-32 of
// type and data): IHDR (size and pixel format), IDAT (the zlib stream of the
// pixel rows, each prefixed by its filter byte) and IEND.
//
// The pixel stream is compressed with zlib rather than written as stored
// deflate blocks: a plot is mostly runs of white, so deflate makes the files
// tens of times smaller, and zlib is on every Debian system anyway. The
// chunk CRCs use ladder's own CRC-32 (the same polynomial PNG specifies).
#include "src/report/png.h"

#include <zlib.h>

#include <cstdint>
#include <vector>

#include "src/core/crc32.h"

namespace ladder::report {
namespace {

void AppendU32(std::string* out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out->append(bytes, 4);
}

void AppendChunk(std::string* out, const char type[4], const std::string& data) {
  AppendU32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out->size();
  out->append(type, 4);
  out->append(data);
  AppendU32(out, Crc32(0, out->data() + start, out->size() - start));
}

}  // namespace

absl::StatusOr<std::string> EncodePng(const Image& image) {
  // Each row: filter type 0 (none), then the row's RGB bytes.
  const size_t row_bytes = static_cast<size_t>(image.width) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((row_bytes + 1) * image.height);
  for (int y = 0; y < image.height; ++y) {
    raw.push_back(0);
    const uint8_t* row = image.rgb.data() + row_bytes * y;
    raw.insert(raw.end(), row, row + row_bytes);
  }
  uLongf packed_size = compressBound(raw.size());
  std::string packed(packed_size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size, raw.data(), raw.size(),
                Z_DEFAULT_COMPRESSION) != Z_OK) {
    return absl::InternalError("zlib could not compress the PNG pixel data");
  }
  packed.resize(packed_size);

  std::string header;
  AppendU32(&header, static_cast<uint32_t>(image.width));
  AppendU32(&header, static_cast<uint32_t>(image.height));
  header += static_cast<char>(8);  // bits per sample
  header += static_cast<char>(2);  // colour type: truecolour (RGB)
  header += std::string(3, '\0');  // deflate compression, adaptive filtering, no interlace

  std::string png("\x89PNG\r\n\x1a\n", 8);
  AppendChunk(&png, "IHDR", header);
  AppendChunk(&png, "IDAT", packed);
  AppendChunk(&png, "IEND", "");
  return png;
}

}  // namespace ladder::report
