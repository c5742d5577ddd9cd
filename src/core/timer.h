// Wall-clock timing on the monotonic clock.
#pragma once

#include <algorithm>
#include <chrono>

namespace ladder {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
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
