// AdamW over a model's parameter table: clip the global gradient norm, then
// one decoupled-weight-decay Adam update per tensor (matrices decay; biases,
// LayerNorm and nothing else do). Owns the two moment buffers.
#pragma once

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/parameters.h"

namespace ladder {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double grad_clip = 1.0;  // 0 disables clipping
};

class AdamW {
 public:
  static absl::StatusOr<AdamW> Create(const ParameterTable* table, Backend* backend,
                                      const AdamWConfig& cfg);

  // Global L2 norm of `grads` (before clipping), in a fixed reduction order.
  absl::StatusOr<double> GradNorm(Tensor grads) const;
  // One update at 1-based `step` with learning rate lr, scaling the gradient
  // by min(1, grad_clip / grad_norm) first.
  absl::Status Update(Tensor weights, Tensor grads, double grad_norm, double lr, int step);

  int64_t state_bytes() const;

 private:
  AdamW(const ParameterTable* table, Backend* backend, const AdamWConfig& cfg)
      : table_(table), backend_(backend), cfg_(cfg) {}

  const ParameterTable* table_;
  Backend* backend_;
  AdamWConfig cfg_;
  DeviceBuffer m_, v_;
};

}  // namespace ladder
