// Wall-clock timing on the monotonic clock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ladder {

// The monotonic clock in nanoseconds: the readings Timer and the step trace
// (src/core/trace.h) share. Every process on one machine reads the same clock.
inline int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  // When the timer started (or was last reset), on NowNanos()'s scale.
  int64_t start_nanos() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count();
  }
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void Reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Seconds of the fastest of `reps` runs of run(), after one untimed warm-up
// run unless the caller has warmed up already. The best, not the mean: on a
// shared machine a slow run measures the neighbours.
template <typename F>
double BestSeconds(F run, int reps, bool warm_up = true) {
  if (warm_up) run();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    run();
    best = std::min(best, t.Seconds());
  }
  return best;
}

}  // namespace ladder
