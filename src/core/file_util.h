// Whole-file reads and crash-safe writes.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ladder {

// Reads a file; NotFound naming the path if it cannot be opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Writes `contents` to path.tmp, flushes it to disk, then renames it over
// `path`: readers see the old file or the new one, never a torn one.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace ladder
