// The hang watchdog: how a communicator waits for an operation it issued.
//
// A collective that a peer never joins blocks forever, and with it the whole
// job, silently. Communicators therefore issue every operation
// non-blocking and poll it, pausing through a Watchdog between polls. The
// first kSpinSeconds of pauses return at once (a fast operation completes
// without sleeping); after that each pause sleeps, doubling from 1 us up to
// kMaxSleepUs (Linux rounds short sleeps up to its ~50 us timer slack).
// Sleeping keeps waiting ranks off the CPU, which matters when ranks
// outnumber cores; the cap bounds the latency a sleep adds.
//
// When a pause finds the timeout passed, the rank prints exactly one line to
// stderr,
//   ladder: rank R timed out after Ns in <op> on the <axis> axis waiting for
//   world rank(s) A, B
// runs the optional cleanup (NCCL aborts its communicator) and ends the whole
// job with exit code 3 (MpiRuntime::Abort). A timeout of 0 waits forever.
#pragma once

#include <functional>
#include <vector>

#include "src/core/timer.h"
#include "src/parallel/grid.h"

namespace ladder {

class Watchdog {
 public:
  static constexpr double kSpinSeconds = 50e-6;
  static constexpr int kMaxSleepUs = 100;

  // Starts the clock for one operation. `world_rank` is this rank; the
  // others name what the line reports. `before_abort` may be empty.
  Watchdog(double timeout_seconds, int world_rank, const char* op, Axis axis,
           std::vector<int> waiting_for, std::function<void()> before_abort = nullptr);

  // Call after each poll that found the operation unfinished.
  void Pause();

 private:
  [[noreturn]] void Fire();

  Timer timer_;
  double timeout_;
  int world_rank_;
  const char* op_;
  Axis axis_;
  std::vector<int> waiting_for_;
  std::function<void()> before_abort_;
  int sleep_us_ = 1;
};

}  // namespace ladder
