#include "src/cli/model_dir.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "src/checkpoint/checkpoint.h"
#include "src/core/status.h"
#include "src/tokenizer/tokenizer_dir.h"

namespace ladder {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<ModelDir> WithTokenizer(ModelFile model, const std::string& dir) {
  ASSIGN_OR_RETURN(Tokenizer tok, LoadTokenizerFor(model.config, dir));
  return ModelDir{std::move(model), std::move(tok)};
}

}  // namespace

absl::StatusOr<Tokenizer> LoadTokenizerFor(const GptConfig& cfg, const std::string& dir) {
  ASSIGN_OR_RETURN(Tokenizer tok, LoadTokenizerDir(dir));  // either kind
  if (tok.vocab_size() != cfg.vocab_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tokenizer in '", dir, "' has ", tok.vocab_size(),
                     " tokens but the model expects ", cfg.vocab_size));
  }
  return tok;
}

absl::StatusOr<ModelDir> LoadModelDir(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    ASSIGN_OR_RETURN(ModelFile model, LoadModelFile(path));
    const fs::path parent = fs::path(path).parent_path();
    return WithTokenizer(std::move(model), parent.empty() ? "." : parent.string());
  }
  if (!fs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat("model '", path, "' does not exist"));
  }
  if (fs::exists(path + "/model.bin", ec)) {
    ASSIGN_OR_RETURN(ModelFile model, LoadModelFile(path + "/model.bin"));
    return WithTokenizer(std::move(model), path);
  }
  if (HasCheckpoint(path) || fs::exists(path + "/manifest", ec)) {
    ASSIGN_OR_RETURN(CheckpointSummary c, VerifyCheckpoint(path));
    return WithTokenizer(ModelFile{c.manifest.model, std::move(c.weights)},
                         c.step_dir);
  }
  return absl::NotFoundError(
      absl::StrCat("'", path, "' holds neither model.bin nor a checkpoint (see docs/formats.md)"));
}

absl::Status SaveModelDir(const std::string& dir, const GptConfig& cfg,
                          const std::vector<float>& weights, const Tokenizer& tokenizer) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  RETURN_IF_ERROR(SaveTokenizerDir(tokenizer, dir));
  return SaveModelFile(dir + "/model.bin", cfg, weights);
}

absl::StatusOr<std::unique_ptr<Gpt>> CreateInferenceModel(const ModelFile& model, Backend* backend,
                                                          WeightFormat format) {
  ASSIGN_OR_RETURN(auto gpt, Gpt::Create(model.config, backend, 1, /*training=*/false));
  RETURN_IF_ERROR(gpt->SetWeights(model.weights.data()));
  RETURN_IF_ERROR(gpt->QuantizeWeights(format));
  return gpt;
}

}  // namespace ladder
