// Whole-file reads and crash-safe writes.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ladder {

// Reads a file; NotFound naming the path if it cannot be opened.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Writes `contents` to path.tmp, flushes it to disk, then renames it over
// `path`: readers see the old file or the new one, never a torn one.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);
// Several files that belong together (path, contents): every one is
// written to its path.tmp and flushed before any is renamed over its path,
// in the order given. A failure while writing (a full disk, a missing
// directory) removes the staged files and leaves every old file as it was,
// so a reader never finds new files beside old ones; only a failed rename,
// after all were written, can leave the first ones renamed.
absl::Status WriteFilesAtomically(const std::vector<std::pair<std::string, std::string>>& files);

// A command's output directory, made for it. Create(dir) makes dir and its
// missing parents (an error names dir). When the object dies, each
// directory it made that is still empty is removed, deepest first, so a
// command that fails after making its output directory leaves nothing
// behind; one that wrote anything keeps it, and directories that existed
// before are never touched. One owner, one thread.
class MadeDirs {
 public:
  MadeDirs() = default;
  MadeDirs(const MadeDirs&) = delete;
  MadeDirs& operator=(const MadeDirs&) = delete;
  ~MadeDirs();
  absl::Status Create(const std::string& dir);

 private:
  std::vector<std::filesystem::path> made_;  // outermost first
};

}  // namespace ladder
