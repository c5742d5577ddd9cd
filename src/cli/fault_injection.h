// --inject-fault: deliberate failures for recovery tests and for teaching
// what each one costs. One fault per run:
//   kill:RANK@STEP           rank RANK kills itself (SIGKILL) right after step
//                            STEP, as a crashed node would
//   nan@STEP                 step STEP's gradient turns NaN (once): the guard
//                            skips the update
//   crash-during-save@STEP   rank 0 dies inside the checkpoint of step STEP,
//                            after the shards are written, before the commit
//   enospc@STEP              every shard write of step STEP's checkpoint fails
//                            as on a full disk
//   slow:RANK:MS             rank RANK sleeps MS milliseconds after every step
//                            (a straggler: the others wait for it)
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ladder {

struct FaultPlan {
  int kill_rank = -1;
  int64_t kill_step = -1, nan_step = -1, crash_save_step = -1, enospc_step = -1;
  int slow_rank = -1;
  int64_t slow_ms = 0;
};

// The empty string is no fault; anything malformed is InvalidArgument.
absl::StatusOr<FaultPlan> ParseFault(const std::string& spec);

}  // namespace ladder
