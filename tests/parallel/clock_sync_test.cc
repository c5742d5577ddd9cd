// Clock offsets under mpirun: every rank reads a clock shifted by a known
// amount (hours, either way), and EstimateClockOffset must find each
// rank's shift against rank 0's within the error bound it reports, with a
// bound far below the shifts; rank 0's offset is exactly zero; a group of
// one communicates nothing and gets zero. Prints one line per failed check
// and exits 1 if any rank failed.
#include "src/parallel/clock_sync.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/parallel/mpi_comm.h"

namespace ladder {
namespace {

// Rank r's clock runs this far ahead of the true time.
int64_t Shift(int r) { return (r % 2 ? 1 : -1) * int64_t{r} * 3'600'000'000'000 + 12'345 * r; }

int failures = 0;
void Check(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "FAIL: rank %d: %s\n", MpiRuntime::world_rank(), what.c_str());
  ++failures;
}

absl::Status Run() {
  const int size = MpiRuntime::world_size(), rank = MpiRuntime::world_rank();
  GridShape shape;
  shape.dp = size;
  ASSIGN_OR_RETURN(Grid grid, Grid::Create(shape, size, rank));
  ASSIGN_OR_RETURN(Communicators comms, CreateHostCommunicators(grid, 60));
  Communicator& world = comms[Axis::kWorld];
  const int64_t shift = Shift(rank);
  const auto clock = [shift] { return NowNanos() + shift; };
  for (int rounds : {1, 8}) {
    ASSIGN_OR_RETURN(const ClockOffset got, EstimateClockOffset(world, clock, rounds));
    const int64_t want = shift - Shift(0);
    const std::string what = absl::StrCat(rounds, " rounds: offset ", got.offset_ns, " ns +- ",
                                          got.error_ns, ", true ", want);
    if (rank == 0) {
      Check(got.offset_ns == 0 && got.error_ns == 0, what);
    } else {
      Check(got.error_ns >= 0 && got.error_ns < 1'000'000'000, what + " (bound too loose)");
      const int64_t miss = got.offset_ns - want;
      Check(miss <= got.error_ns && -miss <= got.error_ns, what + " (outside the bound)");
    }
  }
  // A group of one: no messages (a peer would hang), zero.
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> alone,
                   CreateMpiCommunicator(Axis::kData, {rank}, 60));
  ASSIGN_OR_RETURN(const ClockOffset self, EstimateClockOffset(*alone, clock));
  Check(self.offset_ns == 0 && self.error_ns == 0, "a group of one is not zero");
  return absl::OkStatus();
}

}  // namespace
}  // namespace ladder

int main(int argc, char** argv) {
  using ladder::MpiRuntime;
  if (absl::Status s = MpiRuntime::Init(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "clock_sync_test: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  absl::Status s = ladder::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "clock_sync_test: rank %d: %s\n", MpiRuntime::world_rank(),
                 std::string(s.message()).c_str());
  }
  MpiRuntime::Finalize();
  return s.ok() && ladder::failures == 0 ? 0 : 1;
}
