// The step guard: decides whether a step's update is applied. A non-finite
// loss or gradient norm, or a loss that spikes more than `spike_z` standard
// deviations above its running mean, skips the update (the data and the
// step count still advance, as Megatron does); the trainer counts it, and
// after `max_bad_steps` consecutive bad steps `ladder train` rolls back to
// the last checkpoint. The running statistics are exponential moving
// averages, saved in checkpoints so a resumed run decides identically.
#pragma once

#include <cstdint>

namespace ladder {

struct GuardConfig {
  double spike_z = 0;  // 0: no spike detection
  int max_bad_steps = 3;
};

class StepGuard {
 public:
  enum class Verdict { kApply, kNonFinite, kSpike };
  struct State {
    int64_t count = 0;  // good steps seen
    double mean = 0, var = 0;
    int64_t skipped = 0;
    int consecutive_bad = 0;
  };

  explicit StepGuard(GuardConfig cfg = {}) : cfg_(cfg) {}

  Verdict Check(double loss, double grad_norm) const;
  // Records the step's outcome: statistics learn from applied steps only.
  void Record(Verdict v, double loss);

  bool needs_rollback() const { return state_.consecutive_bad >= cfg_.max_bad_steps; }
  const State& state() const { return state_; }
  void Restore(const State& s) { state_ = s; }

 private:
  static constexpr int kWarmup = 20;      // steps before spikes are judged
  static constexpr double kAlpha = 0.05;  // EMA weight of a new loss
  GuardConfig cfg_;
  State state_;
};

}  // namespace ladder
