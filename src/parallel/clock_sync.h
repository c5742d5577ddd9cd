// Clock offsets between ranks, so that times read on different nodes can be
// placed on one axis (the merged step trace, src/train/step_trace.h).
//
// Method (NTP's, over the world group): rank 0 plays `rounds` ping-pongs
// with each other rank in turn. In one round rank 0 reads its clock (t0) and
// sends a message; rank r answers with its own clock reading tr; rank 0
// reads t1 on receipt. Rank r's reading was taken at some rank-0 time in
// [t0, t1], so
//
//   offset = tr - (t0 + t1) / 2,  within +- (t1 - t0) / 2 of the true offset
//
// if neither clock drifts during the round. Of the rounds, the one with the
// smallest round trip t1 - t0 gives the estimate and its error bound.
// Processes on one machine share the monotonic clock: their true offset is
// zero, and the estimate is zero to within the bound.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "src/parallel/comm.h"

namespace ladder {

struct ClockOffset {
  // This rank's clock minus rank 0's, nanoseconds: a reading here, less
  // offset_ns, is a reading of rank 0's clock.
  int64_t offset_ns = 0;
  // |estimate - true offset| <= error_ns (half the best round trip).
  int64_t error_ns = 0;
};

// Collective over `world` (every rank calls it at the same point, with the
// same `rounds` >= 1); `clock` reads this rank's clock in nanoseconds (a
// test passes a shifted one). Returns this rank's offset against rank 0
// (rank 0: zero, exactly). A group of one communicates nothing. Errors are
// the communicator's.
absl::StatusOr<ClockOffset> EstimateClockOffset(Communicator& world,
                                                const std::function<int64_t()>& clock,
                                                int rounds = 8);

}  // namespace ladder
