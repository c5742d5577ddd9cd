#include "src/train/guard.h"

#include <cmath>

namespace ladder {

StepGuard::Verdict StepGuard::Check(double loss, double grad_norm) const {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return Verdict::kNonFinite;
  if (cfg_.spike_z > 0 && state_.count >= kWarmup &&
      loss > state_.mean + cfg_.spike_z * std::sqrt(state_.var)) {
    return Verdict::kSpike;
  }
  return Verdict::kApply;
}

void StepGuard::Record(Verdict v, double loss) {
  if (v != Verdict::kApply) {
    ++state_.skipped;
    ++state_.consecutive_bad;
    return;
  }
  state_.consecutive_bad = 0;
  if (state_.count == 0) {
    state_.mean = loss;
    state_.var = 0;
  } else {
    const double d = loss - state_.mean;
    state_.mean += kAlpha * d;
    state_.var = (1 - kAlpha) * (state_.var + kAlpha * d * d);
  }
  ++state_.count;
}

}  // namespace ladder
