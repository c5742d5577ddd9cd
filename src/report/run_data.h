// Reading a training run's output directory (what `ladder train --out DIR`
// writes, docs/formats.md) for `ladder report`: metrics.jsonl (required),
// and when present events.jsonl, ranks.json and gpu.jsonl.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/train/metrics.h"

namespace ladder::report {

// One line of events.jsonl: something that happened to the run.
struct RunEvent {
  double time = 0;  // Unix seconds
  int64_t step = 0;
  std::string kind;  // "start", "save", "mem_save", "restore", "rollback", ...
  std::string detail;
};

// One rank of ranks.json: its grid position and what it held.
struct RankInfo {
  int rank = 0, pp = 0, dp = 0, tp = 0;
  int64_t weights = 0, grads = 0, optimizer = 0, activations = 0, allocated = 0;
  std::map<std::string, int64_t> comm_bytes;  // axis -> payload bytes in the first step
};

// One line of gpu.jsonl (src/train/gpu_telemetry.h).
struct GpuSample {
  double time = 0;  // Unix seconds
  int gpu = 0;
  double util = 0;  // percent
  int64_t mem_used = 0, mem_total = 0;
  double power_w = 0;
};

struct RunData {
  std::string dir;
  std::vector<StepRecord> steps;  // in file order
  std::vector<RunEvent> events;
  std::vector<RankInfo> ranks;
  std::vector<GpuSample> gpu;
  // Things the reader tolerated, one line each (a torn last line).
  std::vector<std::string> warnings;
};

// Reads the run in `dir`. Errors, each one line naming the file:
// NotFound for a missing directory or metrics.jsonl; InvalidArgument for a
// line that is not a JSON object or lacks a required field, as
// "DIR/metrics.jsonl:7: ...". The last line of a .jsonl file that does not
// end in a newline and does not parse is a record cut short by a killed
// run: it is dropped with a warning instead. The optional files are skipped
// when absent but must be well-formed when present.
absl::StatusOr<RunData> ReadRunData(const std::string& dir);

}  // namespace ladder::report
