// StragglerDetector: names the rank that a synchronous job waits for.
//
// A step of a synchronous job ends when its slowest rank arrives, so one
// slow rank (a throttled GPU, a busy host) costs every rank its lateness.
// Each step the run (src/train/run.h) gathers every rank's compute seconds:
// the rank's time since the previous step's gather (the rest of that
// step's bookkeeping, the Env's AfterStep, and this step's work), less the
// time it spent inside collectives of the tensor, data and embedding axes
// and less its pipeline bubble or pipeline-call seconds, whichever is
// larger (the bubble holds the hand-overs' waits). A rank that is slow
// computes longer; the ranks waiting for it sit in the step's collectives,
// which are not compute. (A delay in AfterStep counts in the next step.) The detector keeps the
// last `window` steps of those times and, once it holds that many, compares each rank's mean with
// the median of the ranks' means: the slowest rank is named when its mean exceeds the median by
// `factor`. Its record says
//   ratio       its mean / the median of the means
//   wait_share  (its mean - the median) / the mean step time (the slowest
//               rank's step, compute and waits): the share of each step
//               that the other ranks spent waiting for it.
// An episode starts on the first step a rank is named (or another rank
// replaces it) and ends on the first step no rank is; the run writes one
// event per episode (events.jsonl, kind "straggler").
//
// Not thread-safe; the run's thread owns it. Every rank may hold one and
// feeds it the same gathered times, so all ranks reach the same verdict.
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "src/train/metrics.h"

namespace ladder {

struct StragglerOptions {
  int window = 5;       // steps averaged; at least 1
  double factor = 1.5;  // a rank is named above factor x the median; > 1

  // InvalidArgument naming --straggler-window or --straggler-factor.
  absl::Status Validate() const;
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options) : options_(options) {}

  struct Verdict {
    std::optional<StepRecord::Straggler> straggler;  // named over the window ending now
    bool episode_start = false;                      // named now, not (or another) before
  };
  // One step: `compute` holds every rank's compute seconds (rank order, the
  // same count each step), `step_seconds` the step's wall time (the longest
  // of the ranks' steps).
  Verdict Observe(const std::vector<double>& compute, double step_seconds);

 private:
  StragglerOptions options_;
  std::deque<std::vector<double>> compute_;  // the last `window` steps
  std::deque<double> step_seconds_;
  int named_ = -1;  // the rank of the current episode, -1 outside one
};

}  // namespace ladder
