#include "src/train/events.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace ladder {

absl::StatusOr<EventLog> EventLog::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  return EventLog(f);
}

EventLog::~EventLog() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status EventLog::Append(int64_t step, const std::string& kind, const std::string& detail) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string line =
      absl::StrFormat("{\"time\":%.3f,\"step\":%d,\"kind\":%s,\"detail\":%s}\n", now, step,
                      nlohmann::json(kind).dump(), nlohmann::json(detail).dump());
  if (std::fputs(line.c_str(), file_) < 0 || std::fflush(file_) != 0) {
    return absl::InternalError("cannot write an event line");
  }
  return absl::OkStatus();
}

}  // namespace ladder
