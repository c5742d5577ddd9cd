// AdamW over a model's parameter table: clip the global gradient norm, then
// one decoupled-weight-decay Adam update per tensor (matrices decay; biases,
// LayerNorm and nothing else do). Owns the two moment buffers.
#pragma once

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/parameters.h"
#include "src/parallel/comm.h"

namespace ladder {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double grad_clip = 1.0;  // 0 disables clipping
};

class AdamW {
 public:
  // `tp`: the tensor-parallel group whose shards together form the model
  // (null for none); the gradient norm is taken over the whole model.
  static absl::StatusOr<AdamW> Create(const ParameterTable* table, Backend* backend,
                                      const AdamWConfig& cfg, Communicator* tp = nullptr);

  // Global L2 norm of the whole model's gradient (before clipping), in a fixed
  // reduction order: split tensors summed over the tensor-parallel shards,
  // replicated ones counted once. Collective over `tp`.
  absl::StatusOr<double> GradNorm(Tensor grads) const;
  // One update at 1-based `step` with learning rate lr, scaling the gradient
  // by min(1, grad_clip / grad_norm) first.
  absl::Status Update(Tensor weights, Tensor grads, double grad_norm, double lr, int step);

  int64_t state_bytes() const;

 private:
  AdamW(const ParameterTable* table, Backend* backend, const AdamWConfig& cfg, Communicator* tp)
      : table_(table), backend_(backend), cfg_(cfg), tp_(tp) {}

  const ParameterTable* table_;
  Backend* backend_;
  AdamWConfig cfg_;
  Communicator* tp_;
  DeviceBuffer m_, v_;
};

}  // namespace ladder
