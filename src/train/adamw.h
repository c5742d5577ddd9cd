// AdamW over a range of a model's flat parameter buffer: clip the global
// gradient norm, then a decoupled-weight-decay Adam update of every tensor
// (or part of one) in the range (matrices decay; biases and LayerNorm do
// not). Owns the two moment buffers, sized to the range.
//
// The range is the whole table, or with ZeRO-1 this data-parallel rank's
// 1/D of the flat buffer: then each rank keeps only its shard of the moments
// and updates only its shard of the weights (the trainer all-gathers them).
//
// Two places: the gradient norm runs where the gradients are (`backend`),
// the moments and the update where the state lives (`state`: the same
// backend, or a CPU backend with optimizer offload, src/train/offload.h).
#pragma once

#include <cstdint>

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
  // Updates floats [begin, end) of buffers laid out by `table` (end may pass
  // table->total_floats(): padding is skipped). `tp` and `pp`: the tensor-
  // parallel and pipeline groups whose shards and stages together form the
  // model (null for none). `state`: the backend whose memory holds the
  // moments and which runs Update (null: `backend`). Neither is owned.
  static absl::StatusOr<AdamW> Create(const ParameterTable* table, Backend* backend,
                                      const AdamWConfig& cfg, int64_t begin, int64_t end,
                                      Communicator* tp = nullptr, Communicator* pp = nullptr,
                                      Backend* state = nullptr);

  // Global L2 norm of the whole model's gradient (before clipping) from
  // `grads`, the gradient of this range (range-sized): split tensors summed
  // over the tensor-parallel shards, replicated ones counted once, every
  // pipeline stage's tensors summed (the tied embedding once), and summed
  // over `range_group` (the data-parallel group under ZeRO-1, whose ranks
  // hold the other ranges; null otherwise). Collective over all three.
  // The device reduces each tensor (or the part of it in the range) to one
  // float in a slot of its own; one copy brings the slots to the host, which
  // adds them in double in table order. So a step waits for the device once
  // here, whatever the number of tensors.
  absl::StatusOr<double> GradNorm(Tensor grads, Communicator* range_group);
  // One update at 1-based `step` with learning rate lr of `weights` (the
  // range, range-sized) from `grads`, all on the state backend's device, scaling the gradient by
  // min(1, grad_clip / grad_norm) first. `copy`, if not empty, is the range
  // of a bf16 model's weight copy: it receives the updated weights rounded
  // stochastically with the words of (round_seed, step) at each element's
  // ParameterTable::RoundingOffset, in the same pass.
  absl::Status Update(Tensor weights, Tensor grads, double grad_norm, double lr, int step,
                      Tensor copy = Tensor(), uint64_t round_seed = 0);

  int64_t state_bytes() const;
  Backend* state_backend() const { return state_; }
  // The moments of the range (range-sized tensors on the state backend's
  // device), for checkpoints.
  Tensor moment_m() const { return RangeView(m_); }
  Tensor moment_v() const { return RangeView(v_); }

 private:
  AdamW(const ParameterTable* table, Backend* backend, Backend* state, const AdamWConfig& cfg,
        int64_t begin, int64_t end, Communicator* tp, Communicator* pp)
      : table_(table),
        backend_(backend),
        state_(state),
        cfg_(cfg),
        begin_(begin),
        end_(end),
        tp_(tp),
        pp_(pp) {}
  // Calls f(i, first, count): the part of tensor i inside the range, as
  // offsets relative to the range's start.
  template <typename F>
  absl::Status ForEachSegment(F f) const;
  Tensor RangeView(const DeviceBuffer& b) const {
    return Tensor::F32(static_cast<float*>(b.get()), {end_ - begin_}, state_->device());
  }

  const ParameterTable* table_;
  Backend* backend_;
  Backend* state_;
  AdamWConfig cfg_;
  int64_t begin_, end_;
  Communicator* tp_;
  Communicator* pp_;
  DeviceBuffer m_, v_;
  // GradNorm's per-tensor sums of squares: one f32 slot per table tensor.
  DeviceBuffer sums_;
};

}  // namespace ladder
