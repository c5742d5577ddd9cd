// Spin, then sleep with backoff, then give up loudly (see watchdog.h).
#include "src/parallel/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/parallel/mpi_comm.h"

namespace ladder {

Watchdog::Watchdog(double timeout_seconds, int world_rank, const char* op, Axis axis,
                   std::vector<int> waiting_for, std::function<void()> before_abort)
    : timeout_(timeout_seconds),
      world_rank_(world_rank),
      op_(op),
      axis_(axis),
      waiting_for_(std::move(waiting_for)),
      before_abort_(std::move(before_abort)) {}

void Watchdog::Pause() {
  const double waited = timer_.Seconds();
  if (timeout_ > 0 && waited > timeout_) Fire();
  if (waited < kSpinSeconds) return;
  std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
  sleep_us_ = std::min(2 * sleep_us_, kMaxSleepUs);
}

void Watchdog::Fire() {
  const std::string peers = absl::StrCat(waiting_for_.size() == 1 ? "world rank " : "world ranks ",
                                         absl::StrJoin(waiting_for_, ", "));
  std::fprintf(stderr, "ladder: rank %d timed out after %gs in %s on the %s axis waiting for %s\n",
               world_rank_, timeout_, op_, AxisName(axis_), peers.c_str());
  if (before_abort_) before_abort_();
  MpiRuntime::Abort(3);
}

}  // namespace ladder
