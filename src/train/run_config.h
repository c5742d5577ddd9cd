// RunConfig: a model plus how to train it, read from one config file
// (configs/*.conf). Command-line flags override single keys afterwards.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/core/config.h"
#include "src/model/gpt_config.h"

namespace ladder {

struct RunConfig {
  GptConfig model;
  // Batch: `batch_size` sequences of `context` tokens per micro-batch; the
  // optimizer steps once per `total_batch_tokens` (gradient accumulation).
  int batch_size = 12;
  int64_t total_batch_tokens = 0;  // 0: one micro-batch per step
  int64_t steps = 1000;
  // AdamW with linear warmup then cosine decay from lr to min_lr.
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global norm; 0 disables
  // Bookkeeping.
  int64_t eval_every = 100;   // steps between validation losses (0: only at the end)
  int64_t eval_batches = 10;  // validation micro-batches per evaluation
  int64_t log_every = 10;     // steps between progress lines
  uint64_t seed = 1337;
  std::string data;       // text file or prepared shard directory
  std::string tokenizer;  // tokenizer file; empty: trained on the data (or bytes)
  double val_fraction = 0.05;

  int AccumulationSteps() const;
  absl::Status Validate() const;
};

// Reads every key of the file into a RunConfig; unknown keys are errors.
absl::StatusOr<RunConfig> LoadRunConfig(const std::string& path);

}  // namespace ladder
