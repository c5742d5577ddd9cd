#include "src/cli/model_dir.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<ModelDir> LoadModelDir(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat("model directory '", dir, "' does not exist"));
  }
  ASSIGN_OR_RETURN(ModelFile model, LoadModelFile(dir + "/model.bin"));
  ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(dir + "/tokenizer.bpe"));
  if (tok.vocab_size() != model.config.vocab_size) {
    return absl::FailedPreconditionError(
        absl::StrCat("tokenizer in '", dir, "' has ", tok.vocab_size(),
                     " tokens but the model expects ", model.config.vocab_size));
  }
  return ModelDir{std::move(model), std::move(tok)};
}

absl::Status SaveModelDir(const std::string& dir, const GptConfig& cfg,
                          const std::vector<float>& weights, const Tokenizer& tokenizer) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  RETURN_IF_ERROR(tokenizer.Save(dir + "/tokenizer.bpe"));
  return SaveModelFile(dir + "/model.bin", cfg, weights);
}

}  // namespace ladder
