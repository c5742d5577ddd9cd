// A ladder model as llama.cpp's GGUF (architecture gpt2): the metadata keys,
// tensors and tokenizer that llama.cpp's GPT-2 loader reads (gguf_format.h
// lists each with the llama.cpp source it comes from).
//
// Ladder's matrices are [out, in], row major: already ggml's {in, out}
// layout (out rows of in values), so nothing is transposed; wte loses its
// padding rows; the output head is left out (llama.cpp then uses
// token_embd, GPT-2's tie). Tensors of one dimension and position_embd stay
// F32 whatever the type, as llama.cpp's converter keeps them; with Q8_0 a
// matrix whose rows are not a whole number of 32-value blocks is refused
// (naming it) rather than silently stored another way.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/formats/gguf_format.h"
#include "src/model/gpt_config.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

// The GGUF file's bytes for `weights` (ParameterTable(GptParameterSpecs(cfg))
// layout) and `tokenizer` (any kind, written as GPT-2's: its tokens spelled
// byte-to-unicode, its merges in rank order, end-of-text a control token and
// bos/eos), the matrices in `type` (kF32, kF16 or kQ8_0), named `name`.
// InvalidArgument for another type, a weight count that is not the model's,
// a value the type cannot hold (F16 overflow, a non-finite Q8_0 value);
// FailedPrecondition for a tokenizer GPT-2's vocabulary cannot spell.
absl::StatusOr<std::string> GptToGguf(const GptConfig& cfg, const std::vector<float>& weights,
                                      const Tokenizer& tokenizer, GgmlType type,
                                      const std::string& name);

}  // namespace ladder
