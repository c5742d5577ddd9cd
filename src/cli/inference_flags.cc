#include "src/cli/inference_flags.h"

#include "absl/strings/str_cat.h"
#include "src/cli/model_dir.h"
#include "src/core/status.h"

namespace ladder {
namespace {

// Draft tokens per step, at most: far more than pays (a draft's proposals
// are accepted less and less far out), and small enough for an int.
constexpr int64_t kMaxSpeculate = 64;

}  // namespace

void AddFormatFlags(FlagSet& flags, FormatFlags* f) {
  flags.String("weights", &f->weights,
               "weight format: fp32, bf16, int8 (groups of 32) or int8-channel");
  flags.String("kv", &f->kv, "KV cache format: fp32 or int8");
  flags.String("activations", &f->activations,
               "activation rows: fp32, or bf16 (needs --weights int8 and cuda or cuda-sim: the "
               "W8A16 matmul on the tensor cores)");
}

absl::Status ApplyActivationsFlag(const FormatFlags& f, Gpt* model) {
  if (f.activations != "fp32" && f.activations != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--activations: expected fp32 or bf16, got '", f.activations, "'"));
  }
  if (f.activations == "fp32" || model == nullptr) return absl::OkStatus();
  const absl::Status s = model->UseBf16Activations();
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat("--activations bf16: ", s.message()));
}

void AddPrefixCacheFlag(FlagSet& flags, bool* no_prefix_cache) {
  flags.Bool("no-prefix-cache", no_prefix_cache,
             "compute every prompt in full, even the prefix already in the KV cache");
}

void AddCudaGraphFlag(FlagSet& flags, bool* cuda_graph) {
  flags.Bool("cuda-graph", cuda_graph,
             "record each decode step's kernels once per batch size as a CUDA graph and replay "
             "it, one launch instead of one per kernel (the same tokens; cuda or cuda-sim)");
}

absl::Status ApplyCudaGraphFlag(bool on, Gpt* model) {
  if (!on || model == nullptr) return absl::OkStatus();
  const absl::Status s = model->UseGraphs(true);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat("--cuda-graph: ", s.message()));
}

void AddDraftFlags(FlagSet& flags, DraftFlags* f) {
  flags.String("draft", &f->model, "a small model proposing tokens for speculative decoding",
               "none");
  flags.Int("speculate", &f->speculate, "tokens the draft proposes per step (needs --draft)");
}

absl::StatusOr<std::unique_ptr<Gpt>> LoadDraftModel(const DraftFlags& f, Backend* backend,
                                                    WeightFormat format, EngineConfig* engine) {
  if (f.model.empty()) {
    if (f.speculate != 0) return absl::InvalidArgumentError("--speculate needs --draft");
    return std::unique_ptr<Gpt>();
  }
  if (f.speculate < 1 || f.speculate > kMaxSpeculate) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculate must be in [1, ", kMaxSpeculate, "], got ", f.speculate));
  }
  ASSIGN_OR_RETURN(ModelDir dir, LoadModelDir(f.model));
  ASSIGN_OR_RETURN(auto draft, CreateInferenceModel(dir.model, backend, format));
  engine->draft = draft.get();
  engine->speculate = static_cast<int>(f.speculate);
  return draft;
}

}  // namespace ladder
