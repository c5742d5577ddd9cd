// Gpt: a GPT-2 model with explicit forward and backward passes over the op
// interface (as llm.c does, no autograd graph). It owns the device memory of
// its weights, gradients and activation arena; the optimizer state lives with
// the trainer. Nothing here knows which backend runs the ops.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/activations.h"
#include "src/model/gpt_config.h"
#include "src/model/parameters.h"
#include "src/parallel/comm.h"

namespace ladder {

class Gpt {
 public:
  // Allocates weights (and gradients if `training`) and an activation arena
  // for up to `max_batch` sequences of cfg.context tokens. With a tensor-
  // parallel group `tp` (size > 1) this rank holds and computes its shard of
  // every layer (Megatron style); its members must make the same calls.
  // `buffer_multiple` pads the flat weight and gradient buffers with zeros to
  // a multiple of that many floats (ZeRO-1 cuts them into equal shards).
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& cfg, Backend* backend,
                                                     int max_batch, bool training,
                                                     Communicator* tp = nullptr,
                                                     int64_t buffer_multiple = 1);

  const GptConfig& config() const { return cfg_; }
  const ParameterTable& table() const { return table_; }
  Backend* backend() const { return backend_; }
  bool training() const { return training_; }
  // Flat views over all weights / gradients, laid out by table().
  Tensor weights() const {
    return Tensor::F32(static_cast<float*>(weights_.get()), {table_.total_floats()});
  }
  Tensor grads() const {
    return Tensor::F32(static_cast<float*>(grads_.get()), {table_.total_floats()});
  }
  // The same buffers with their zero padding (buffer_floats() long).
  int64_t buffer_floats() const { return buffer_floats_; }
  Tensor weight_buffer() const {
    return Tensor::F32(static_cast<float*>(weights_.get()), {buffer_floats_});
  }
  Tensor grad_buffer() const {
    return Tensor::F32(static_cast<float*>(grads_.get()), {buffer_floats_});
  }
  const ActivationSizes& activation_sizes() const { return arena_sizes_; }

  // GPT-2 initialization from a seed (see ParameterTable::Initialize).
  absl::Status InitWeights(uint64_t seed);
  // Copies all weights from / to host memory of table().total_floats() floats.
  absl::Status SetWeights(const float* host);
  absl::Status GetWeights(float* host) const;
  // All weights of the whole model in the unsharded layout
  // (ParameterTable(GptParameterSpecs(config()))), assembled from the shards
  // of the tensor-parallel group: collective over it, every member gets them.
  absl::Status GetLogicalWeights(std::vector<float>* host);

  absl::Status ZeroGrads();
  // Forward over B sequences of T <= context tokens (host arrays of B*T ids).
  // With targets, also computes each token's loss and returns the mean loss;
  // without, returns 0 and only the logits are meaningful.
  absl::StatusOr<double> Forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Backward of the last Forward with targets; accumulates into grads().
  // dloss is the gradient of the objective w.r.t. each token's loss (for a
  // mean over N tokens and A accumulation steps, 1 / (N * A)).
  absl::Status Backward(float dloss);
  // Logits of sequence b at position t of the last Forward: vocab_size floats
  // (FailedPrecondition under tensor parallelism: each rank has a shard).
  absl::Status LogitsAt(int b, int t, std::vector<float>* out) const;
  // Per-token losses of the last Forward with targets (B*T floats).
  absl::Status Losses(std::vector<float>* out) const;

 private:
  Gpt(const GptConfig& cfg, Backend* backend, int max_batch, bool training, ParameterTable table,
      Communicator* tp);
  absl::Status Bind(int B, int T);
  int tp_rank() const;
  int64_t vocab_start() const;  // first logical vocabulary row of this rank's wte

  GptConfig cfg_;
  Backend* backend_;
  int max_batch_;
  bool training_;
  Communicator* tp_;
  ParameterTable table_;
  int64_t buffer_floats_ = 0;
  DeviceBuffer weights_, grads_, arena_;
  ActivationSizes arena_sizes_;
  GptTensors w_, g_;
  GptActivations acts_;
  int bound_B_ = 0, bound_T_ = 0;
};

}  // namespace ladder
