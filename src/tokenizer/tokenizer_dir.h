// Which tokenizer a directory holds (a run directory, a model directory, a
// checkpoint's step directory, the directory beside a model file). The files
// say the kind:
//   DIR/tokenizer.bpe                   ladder's format (bpe.h)
//   DIR/vocab.json + DIR/merges.txt     GPT-2's (bpe.h LoadGpt2)
// Exactly one of the two must be there; this is the only place that decides.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

inline constexpr absl::string_view kLadderTokenizerFile = "tokenizer.bpe";
inline constexpr absl::string_view kGpt2VocabFile = "vocab.json";
inline constexpr absl::string_view kGpt2MergesFile = "merges.txt";

// NotFound naming both file names when neither tokenizer is there;
// FailedPrecondition when both are, or when one of GPT-2's two files is
// missing; otherwise the loader's own errors.
absl::StatusOr<Tokenizer> LoadTokenizerDir(const std::string& dir);

// Writes the files of tok's kind into `dir` (which must exist) and removes
// the other kind's, so the directory names one tokenizer.
absl::Status SaveTokenizerDir(const Tokenizer& tok, const std::string& dir);

// The names of the files a tokenizer of `kind` is saved as.
std::vector<std::string> TokenizerFileNames(TokenizerKind kind);

}  // namespace ladder
