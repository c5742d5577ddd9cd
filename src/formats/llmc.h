// llm.c's files (github.com/karpathy/llm.c, train_gpt2.c): its GPT-2 model
// file and its tokenizer file, read into ladder's model and tokenizer.
//
// Model file: 256 little-endian int32 header values, then every parameter:
//   header[0] 20240326 (magic), [1] version: 3 = fp32, 5 = bf16,
//   [2] maxT, [3] V (real vocabulary), [4] L, [5] NH, [6] C, [7] Vp (the
//   padded vocabulary; llm.c pads to a multiple of 128, as ladder does)
//   then wte [Vp, C], wpe [maxT, C], and for all L layers at once: ln1w,
//   ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C], attprojw [L, C, C],
//   attprojb [L, C], ln2w, ln2b [L, C], fcw [L, 4C, C], fcb [L, 4C],
//   fcprojw [L, C, 4C], fcprojb [L, C], lnfw, lnfb [C].
// llm.c's matrices are [out, in] like ladder's, so values are only
// regrouped layer by layer, never transposed; wte's padding rows come
// along as they are (zero in llm.c's own files).
//
// Tokenizer file: 256 int32 header values, [0] 20240328 (magic), [1]
// version 1 or 2, [2] vocabulary size, [3] the end-of-text id (version 2;
// version 1 has none); then each token as one length byte and its bytes.
// It has no merges: Tokenizer::FromGpt2TokenBytes recovers them from the
// order of GPT-2's vocabulary.
//
// Every length and size is checked against the file before use; errors are
// InvalidArgument naming the file and what is wrong.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/model/gpt_config.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

struct LlmcModel {
  GptConfig config;
  std::vector<float> weights;  // ParameterTable(GptParameterSpecs(config)) layout
};

// `contents`: a model file's bytes; `path` names it in errors.
absl::StatusOr<LlmcModel> ParseLlmcModel(const std::string& contents, const std::string& path);
absl::StatusOr<Tokenizer> ParseLlmcTokenizer(const std::string& contents, const std::string& path);

}  // namespace ladder
