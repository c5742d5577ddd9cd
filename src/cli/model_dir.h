// Where `generate`, `eval`, `serve` and `bench serve` find a trained model
// (--model PATH), in any of three forms:
//   a run directory     as `ladder train --out DIR` leaves it:
//                       DIR/model.bin and DIR's tokenizer
//   a checkpoint        a checkpoint directory (its `latest`) or one of its
//                       step-N directories, saved with any parallel layout
//                       (consolidated on load; the tokenizer is the one
//                       saved in the step directory)
//   a model file        FILE (src/model/model_file.h), with its tokenizer
//                       beside it
// The tokenizer is either kind: tokenizer.bpe (ladder's) or vocab.json +
// merges.txt (GPT-2's), as src/tokenizer/tokenizer_dir.h decides.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/gpt.h"
#include "src/model/model_file.h"
#include "src/model/weight_format.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

struct ModelDir {
  ModelFile model;
  Tokenizer tokenizer;
};

absl::StatusOr<ModelDir> LoadModelDir(const std::string& path);
// The tokenizer in `dir` (either kind), checked against the model's
// vocabulary: FailedPrecondition naming both sizes when they differ.
absl::StatusOr<Tokenizer> LoadTokenizerFor(const GptConfig& cfg, const std::string& dir);
absl::Status SaveModelDir(const std::string& dir, const GptConfig& cfg,
                          const std::vector<float>& weights, const Tokenizer& tokenizer);

// An inference model on `backend` holding `model`'s weights in `format`.
absl::StatusOr<std::unique_ptr<Gpt>> CreateInferenceModel(const ModelFile& model, Backend* backend,
                                                          WeightFormat format);

}  // namespace ladder
