// ladder train --trace FILE --trace-steps A:B: records the step timeline of
// steps A..B on every rank (src/core/trace.h) and writes all ranks' spans
// into one Chrome trace file (docs/formats.md), their clocks aligned to
// rank 0's (src/parallel/clock_sync.h).
//
// The window spans whole steps: recording starts as step A begins and stops
// once step B has finished with everything that belongs to it (validation,
// checkpoint stall), before the next step starts. A run that fails inside
// the window writes no trace.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/core/trace.h"
#include "src/parallel/comm.h"
#include "src/parallel/grid.h"

namespace ladder {

// Steps first..last (1-based, inclusive) of a run.
struct StepWindow {
  int64_t first = 2, last = 3;
};

// "A:B" with 1 <= A <= B; anything else is InvalidArgument naming it:
//   --trace-steps '3-4': expected A:B, the first and last step to trace (1 <= A <= B)
absl::StatusOr<StepWindow> ParseStepWindow(const std::string& spec);

// The window within the steps this run will take, begin..end. An explicit
// window (the user's) is cut to them, and InvalidArgument if none of its
// steps is in the run:
//   --trace-steps 30:40 has no step in this run (steps 1 to 20)
// The default window is moved and cut to fit (1:1 for a one-step run).
absl::StatusOr<StepWindow> FitStepWindow(StepWindow w, bool explicit_window, int64_t begin,
                                         int64_t end);

// One per rank, on the training thread. Owns the rank's TraceRecorder.
class StepTrace {
 public:
  // Records `window` on this rank (its process named by its place in
  // `grid`: "rank 5 (dp 0, tp 1, pp 1)"); rank 0 writes `path`. With a
  // `device` timer (Backend::timer(), not owned), compute spans get their
  // device time too.
  StepTrace(std::string path, StepWindow window, const Grid& grid, DeviceTimer* device);

  // Call with the number of steps done: once before the first step, and
  // after each step has finished with everything that belongs to it. Starts
  // recording when the next step is the window's first (waiting for the
  // device, to anchor its clock to the host's). Once steps_done
  // reaches the window's last, stops recording, estimates this rank's clock
  // offset against rank 0, sends its spans, shifted onto rank 0's clock, to
  // rank 0, which writes the file atomically: collective over `world` on
  // that call (every rank makes it at the same step). Returns true on the
  // rank that wrote the file, on that call only; errors are the
  // communicator's or the write's (naming the path).
  absl::StatusOr<bool> AtStep(int64_t steps_done, Communicator& world);

  const std::string& path() const { return path_; }
  const StepWindow& window() const { return window_; }

 private:
  absl::StatusOr<bool> Finish(Communicator& world);

  std::string path_;
  StepWindow window_;
  std::string process_name_;
  int rank_;
  DeviceTimer* device_;
  TraceRecorder recorder_;
  bool started_ = false, finished_ = false;
  int64_t zero_ns_ = 0;  // when recording started, on this rank's clock
};

}  // namespace ladder
