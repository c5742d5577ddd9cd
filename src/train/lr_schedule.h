// Learning rate: linear warmup from 0 to lr over warmup_steps, then cosine
// decay to min_lr at the last step (GPT-2/3 and nanoGPT's schedule).
#pragma once

#include <cmath>
#include <cstdint>

namespace ladder {

// step is 0-based; total_steps > 0.
inline double LearningRate(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr,
                           double min_lr) {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / warmup_steps;
  const int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 1) return lr;
  const double progress = static_cast<double>(step - warmup_steps) / (decay_steps - 1);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace ladder
