// PNG encoding of an RGB image (raster.h), for the report's picture files.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "src/report/raster.h"

namespace ladder::report {

// The PNG file bytes of `image`: 8-bit truecolour, no interlace, one IDAT
// chunk. Fails (Internal) only if zlib does.
absl::StatusOr<std::string> EncodePng(const Image& image);

}  // namespace ladder::report
