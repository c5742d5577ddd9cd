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

namespace ladder {

class Gpt {
 public:
  // Allocates weights (and gradients if `training`) and an activation arena
  // for up to `max_batch` sequences of cfg.context tokens.
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& cfg, Backend* backend,
                                                     int max_batch, bool training);

  const GptConfig& config() const { return cfg_; }
  const ParameterTable& table() const { return table_; }
  Backend* backend() const { return backend_; }
  bool training() const { return training_; }
  // Flat views over all weights / gradients, laid out by table().
  Tensor weights() const { return Tensor::F32(static_cast<float*>(weights_.get()), {table_.total_floats()}); }
  Tensor grads() const { return Tensor::F32(static_cast<float*>(grads_.get()), {table_.total_floats()}); }
  const ActivationSizes& activation_sizes() const { return arena_sizes_; }

  // GPT-2 initialization from a seed (see ParameterTable::Initialize).
  absl::Status InitWeights(uint64_t seed);
  // Copies all weights from / to host memory of table().total_floats() floats.
  absl::Status SetWeights(const float* host);
  absl::Status GetWeights(float* host) const;

  absl::Status ZeroGrads();
  // Forward over B sequences of T <= context tokens (host arrays of B*T ids).
  // With targets, also computes each token's loss and returns the mean loss;
  // without, returns 0 and only the logits are meaningful.
  absl::StatusOr<double> Forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Backward of the last Forward with targets; accumulates into grads().
  // dloss is the gradient of the objective w.r.t. each token's loss (for a
  // mean over N tokens and A accumulation steps, 1 / (N * A)).
  absl::Status Backward(float dloss);
  // Logits of sequence b at position t of the last Forward: vocab_size floats.
  absl::Status LogitsAt(int b, int t, std::vector<float>* out) const;
  // Per-token losses of the last Forward with targets (B*T floats).
  absl::Status Losses(std::vector<float>* out) const;

 private:
  Gpt(const GptConfig& cfg, Backend* backend, int max_batch, bool training);
  absl::Status Bind(int B, int T);

  GptConfig cfg_;
  Backend* backend_;
  int max_batch_;
  bool training_;
  ParameterTable table_;
  DeviceBuffer weights_, grads_, arena_;
  ActivationSizes arena_sizes_;
  GptTensors w_, g_;
  GptActivations acts_;
  int bound_B_ = 0, bound_T_ = 0;
};

}  // namespace ladder
