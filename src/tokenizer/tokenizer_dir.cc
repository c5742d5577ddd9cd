#include "src/tokenizer/tokenizer_dir.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {
namespace {

namespace fs = std::filesystem;

std::string In(const std::string& dir, absl::string_view name) {
  return (fs::path(dir) / std::string(name)).string();
}

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

}  // namespace

absl::StatusOr<Tokenizer> LoadTokenizerDir(const std::string& dir) {
  const std::string bpe = In(dir, kLadderTokenizerFile);
  const std::string vocab = In(dir, kGpt2VocabFile);
  const std::string merges = In(dir, kGpt2MergesFile);
  const bool has_bpe = Exists(bpe);
  const bool has_vocab = Exists(vocab), has_merges = Exists(merges);
  if (has_bpe && (has_vocab || has_merges)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", dir, "' holds two tokenizers, ", kLadderTokenizerFile, " and ",
                     has_vocab ? kGpt2VocabFile : kGpt2MergesFile, "; keep one"));
  }
  if (has_bpe) return Tokenizer::Load(bpe);
  if (has_vocab && has_merges) return Tokenizer::LoadGpt2(vocab, merges);
  if (has_vocab || has_merges) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", dir, "' has ", has_vocab ? kGpt2VocabFile : kGpt2MergesFile, " but no ",
        has_vocab ? kGpt2MergesFile : kGpt2VocabFile, " (a GPT-2 tokenizer needs both)"));
  }
  return absl::NotFoundError(absl::StrCat("'", dir, "' has no tokenizer: neither ",
                                          kLadderTokenizerFile, " (ladder's) nor ",
                                          kGpt2VocabFile, " + ", kGpt2MergesFile, " (GPT-2's)"));
}

absl::Status SaveTokenizerDir(const Tokenizer& tok, const std::string& dir) {
  if (tok.kind() == TokenizerKind::kGpt2) {
    RETURN_IF_ERROR(tok.SaveGpt2(In(dir, kGpt2VocabFile), In(dir, kGpt2MergesFile)));
  } else {
    RETURN_IF_ERROR(tok.Save(In(dir, kLadderTokenizerFile)));
  }
  const TokenizerKind other =
      tok.kind() == TokenizerKind::kGpt2 ? TokenizerKind::kLadder : TokenizerKind::kGpt2;
  for (const std::string& name : TokenizerFileNames(other)) {
    std::error_code ec;
    fs::remove(In(dir, name), ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot remove '", In(dir, name), "': ", ec.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> TokenizerFileNames(TokenizerKind kind) {
  if (kind == TokenizerKind::kGpt2) {
    return {std::string(kGpt2VocabFile), std::string(kGpt2MergesFile)};
  }
  return {std::string(kLadderTokenizerFile)};
}

}  // namespace ladder
