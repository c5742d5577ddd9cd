// NTP-style clock offsets by ping-pong with rank 0 (clock_sync.h).
#include "src/parallel/clock_sync.h"

#include <limits>

#include "src/core/status.h"

namespace ladder {
namespace {

// One int64 as a host message (the communicators move bytes of any dtype).
Tensor Word(int64_t* v) { return Tensor(v, DType::kI8, {8}, Device::kCpu); }

}  // namespace

absl::StatusOr<ClockOffset> EstimateClockOffset(Communicator& world,
                                                const std::function<int64_t()>& clock, int rounds) {
  ClockOffset mine;
  if (world.size() == 1) return mine;
  if (world.rank() != 0) {
    for (int i = 0; i < rounds; ++i) {
      int64_t ping = 0;
      RETURN_IF_ERROR(world.Recv(Word(&ping), 0));
      int64_t now = clock();
      RETURN_IF_ERROR(world.Send(Word(&now), 0));
    }
    // Rank 0's verdict: the estimate and its bound.
    RETURN_IF_ERROR(world.Recv(Word(&mine.offset_ns), 0));
    RETURN_IF_ERROR(world.Recv(Word(&mine.error_ns), 0));
    return mine;
  }
  for (int r = 1; r < world.size(); ++r) {
    ClockOffset best;
    int64_t best_trip = std::numeric_limits<int64_t>::max();
    for (int i = 0; i < rounds; ++i) {
      int64_t t0 = clock(), theirs = 0;
      RETURN_IF_ERROR(world.Send(Word(&t0), r));
      RETURN_IF_ERROR(world.Recv(Word(&theirs), r));
      const int64_t t1 = clock();
      if (t1 - t0 < best_trip) {
        best_trip = t1 - t0;
        // t0 + (t1 - t0) / 2 rather than (t0 + t1) / 2: no overflow.
        best.offset_ns = theirs - (t0 + (t1 - t0) / 2);
        best.error_ns = (t1 - t0 + 1) / 2;
      }
    }
    RETURN_IF_ERROR(world.Send(Word(&best.offset_ns), r));
    RETURN_IF_ERROR(world.Send(Word(&best.error_ns), r));
  }
  return mine;
}

}  // namespace ladder
