// Flags shared by the commands that run a trained model for inference
// (generate, eval, serve, bench decode, bench serve), declared once so
// their names, defaults and help read the same everywhere.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/core/flags.h"
#include "src/model/gpt.h"
#include "src/model/weight_format.h"
#include "src/serve/engine.h"

namespace ladder {

// --weights fp32|bf16|int8|int8-channel, --kv fp32|int8 (weight_format.h,
// kv_cache.h ParseKvFormat) and --activations fp32|bf16 (Gpt::
// UseBf16Activations).
struct FormatFlags {
  std::string weights = "fp32", kv = "fp32", activations = "fp32";
};
void AddFormatFlags(FlagSet& flags, FormatFlags* f);
// Sets `model`'s activations (null: nothing to do) as --activations says,
// after its weights are packed; InvalidArgument "--activations: ..." for a
// value other than fp32 or bf16, or naming why the model cannot.
absl::Status ApplyActivationsFlag(const FormatFlags& f, Gpt* model);

// --no-prefix-cache: every request computes its whole prompt
// (EngineConfig::prefix_cache off).
void AddPrefixCacheFlag(FlagSet& flags, bool* no_prefix_cache);

// --cuda-graph: decode steps recorded as CUDA graphs once per batch shape
// and replayed (Gpt::UseGraphs).
void AddCudaGraphFlag(FlagSet& flags, bool* cuda_graph);
// Turns graphs on for `model` (null: nothing to do) when `on`;
// InvalidArgument "--cuda-graph: ..." naming why the model cannot.
absl::Status ApplyCudaGraphFlag(bool on, Gpt* model);

// --draft PATH --speculate K: speculative decoding (engine.h).
struct DraftFlags {
  std::string model;
  int64_t speculate = 0;
};
void AddDraftFlags(FlagSet& flags, DraftFlags* f);

// The draft model in `format`, set into `engine` with K; null without
// --draft. InvalidArgument for a K without a draft.
absl::StatusOr<std::unique_ptr<Gpt>> LoadDraftModel(const DraftFlags& f, Backend* backend,
                                                    WeightFormat format, EngineConfig* engine);

}  // namespace ladder
