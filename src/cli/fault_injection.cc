#include "src/cli/fault_injection.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace ladder {

absl::StatusOr<FaultPlan> ParseFault(const std::string& spec) {
  FaultPlan f;
  if (spec.empty()) return f;
  int rank = 0;
  long long a = 0;
  char tail = 0;
  const char* s = spec.c_str();
  if (std::sscanf(s, "kill:%d@%lld%c", &rank, &a, &tail) == 2 && rank >= 0 && a >= 1) {
    f.kill_rank = rank;
    f.kill_step = a;
  } else if (std::sscanf(s, "nan@%lld%c", &a, &tail) == 1 && a >= 1) {
    f.nan_step = a;
  } else if (std::sscanf(s, "crash-during-save@%lld%c", &a, &tail) == 1 && a >= 1) {
    f.crash_save_step = a;
  } else if (std::sscanf(s, "enospc@%lld%c", &a, &tail) == 1 && a >= 1) {
    f.enospc_step = a;
  } else if (std::sscanf(s, "slow:%d:%lld%c", &rank, &a, &tail) == 2 && rank >= 0 && a >= 0) {
    f.slow_rank = rank;
    f.slow_ms = a;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--inject-fault '", spec,
        "' is not one of kill:RANK@STEP, nan@STEP, crash-during-save@STEP, enospc@STEP, "
        "slow:RANK:MS"));
  }
  return f;
}

}  // namespace ladder
