// A trained model directory, as `ladder train` leaves it and `generate`,
// `eval` (and later `serve`) read it:
//   DIR/model.bin       weights and model config (src/model/model_file.h)
//   DIR/tokenizer.bpe   the tokenizer the model was trained with
//   DIR/metrics.jsonl   the training metrics
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/model/model_file.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

struct ModelDir {
  ModelFile model;
  Tokenizer tokenizer;
};

absl::StatusOr<ModelDir> LoadModelDir(const std::string& dir);
absl::Status SaveModelDir(const std::string& dir, const GptConfig& cfg,
                          const std::vector<float>& weights, const Tokenizer& tokenizer);

}  // namespace ladder
