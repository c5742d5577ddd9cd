#include "src/core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is a directory, not a file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  return ss.str();
}

namespace {

// Errors name `path`, the file the caller asked for, not the staging file
// beside it.
absl::Status FileError(const char* what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat("cannot ", what, " '", path, "': ", std::strerror(err)));
}

// Writes `contents` to path.tmp and flushes it to disk; on failure nothing
// is left there.
absl::Status Stage(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot create '", path, "': ", std::strerror(errno)));
  }
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    std::remove(tmp.c_str());
    return FileError(what, path, err);
  };
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return FileError("close", path, err);
  }
  return absl::OkStatus();
}

// Renames path.tmp over path; on failure removes path.tmp.
absl::Status Commit(const std::string& path) {
  const std::string tmp = path + ".tmp";
  if (std::rename(tmp.c_str(), path.c_str()) == 0) return absl::OkStatus();
  const int err = errno;
  std::remove(tmp.c_str());
  return FileError("replace", path, err);
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  RETURN_IF_ERROR(Stage(path, contents));
  return Commit(path);
}

absl::Status WriteFilesAtomically(const std::vector<std::pair<std::string, std::string>>& files) {
  size_t staged = 0;  // the failed one, if any, left nothing
  absl::Status status;
  while (staged < files.size() && status.ok()) {
    status = Stage(files[staged].first, files[staged].second);
    if (status.ok()) ++staged;
  }
  for (size_t i = 0; i < staged; ++i) {
    if (status.ok()) {
      status = Commit(files[i].first);
    } else {
      std::remove((files[i].first + ".tmp").c_str());
    }
  }
  return status;
}

absl::Status MadeDirs::Create(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> missing;  // innermost first
  fs::path start = fs::absolute(dir, ec).lexically_normal();
  if (start.filename().empty()) start = start.parent_path();  // "out/" is "out"
  for (fs::path p = start; !ec && p.has_relative_path(); p = p.parent_path()) {
    if (fs::exists(p, ec) || ec) break;
    missing.push_back(p);
  }
  if (!ec) fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  made_.insert(made_.end(), missing.rbegin(), missing.rend());
  return absl::OkStatus();
}

MadeDirs::~MadeDirs() {
  for (auto p = made_.rbegin(); p != made_.rend(); ++p) {
    std::error_code ec;
    if (!std::filesystem::is_empty(*p, ec) || ec) return;
    std::filesystem::remove(*p, ec);
  }
}

}  // namespace ladder
