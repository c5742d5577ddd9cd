// The run's event log: OUT/events.jsonl, one JSON object per line for each
// thing that happened to the run as a whole rather than to one step's
// numbers (docs/formats.md, "events.jsonl"):
//   {"time":1733280000.123,"step":40,"kind":"save","detail":"..."}
// `time` is Unix seconds, `step` the optimizer steps done when it happened.
// Kinds: start, save, mem_save, restore, rollback, restart, layout,
// straggler, end. The log survives restarts: a resumed run appends to it,
// and so does the supervisor (scripts/train_resilient.sh) when it restarts
// the job, so the file tells the whole story of a run directory.
//
// Rank 0 writes it; each line is flushed as it is appended, so a crash keeps
// every event before it. Not thread-safe: one thread appends.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"

namespace ladder {

class EventLog {
 public:
  // Opens `path` for appending, creating it if absent; NotFound naming the
  // path if it cannot be opened.
  static absl::StatusOr<EventLog> Open(const std::string& path);
  EventLog(EventLog&& other) noexcept : file_(other.file_) { other.file_ = nullptr; }
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  ~EventLog();

  // Appends one event stamped with the current time.
  absl::Status Append(int64_t step, const std::string& kind, const std::string& detail);

 private:
  explicit EventLog(std::FILE* f) : file_(f) {}
  std::FILE* file_;
};

}  // namespace ladder
