// The training loop: micro-batches with gradient accumulation, global-norm
// clipping, AdamW with warmup + cosine LR, periodic validation, metrics.
//
// A step: zero grads; for each of A micro-batches: read B x T tokens, forward,
// backward with dloss = 1 / (B * T * A) (so the gradient is that of the mean
// loss over the whole global batch); grad norm; clip; update. Everything is a
// pure function of (config, seed, data), so two runs give identical losses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/data/loader.h"
#include "src/model/gpt.h"
#include "src/train/adamw.h"
#include "src/train/metrics.h"
#include "src/train/run_config.h"

namespace ladder {

class Trainer {
 public:
  // `train` and `val` must outlive the trainer. `peak_gflops` is the rate MFU
  // is measured against (0: MFU not reported).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const RunConfig& cfg, Backend* backend,
                                                         const std::vector<int32_t>* train,
                                                         const std::vector<int32_t>* val,
                                                         double peak_gflops);

  // One optimizer step; the record has everything but val_loss.
  absl::StatusOr<StepRecord> Step();
  // Mean loss over the first eval_batches * batch_size windows of the
  // validation split, in stream order (the same windows every time).
  absl::StatusOr<double> ValidationLoss();
  // Runs the remaining steps; after each step calls `on_step` (if set) with
  // the record (val_loss filled on evaluation steps).
  absl::Status Run(const std::function<absl::Status(const StepRecord&)>& on_step);

  Gpt& model() { return *model_; }
  int64_t step() const { return step_; }
  const RunConfig& config() const { return cfg_; }
  int64_t tokens_per_step() const;

 private:
  Trainer(const RunConfig& cfg, double peak_gflops) : cfg_(cfg), peak_gflops_(peak_gflops) {}

  RunConfig cfg_;
  double peak_gflops_;
  std::unique_ptr<Gpt> model_;
  std::optional<AdamW> optimizer_;
  std::optional<DataLoader> train_loader_, val_loader_;
  std::vector<int32_t> inputs_, targets_;
  int64_t step_ = 0;
};

}  // namespace ladder
