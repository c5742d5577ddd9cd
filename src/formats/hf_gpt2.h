// Hugging Face's GPT-2 layout and ladder's model, both ways: `config.json`
// to and from a GptConfig, and `model.safetensors` to and from weights laid
// out by ladder's ParameterTable (src/model/parameters.h).
//
// What differs between the two layouts, and what this does about it:
//   - names: HF's h.<l>.attn.c_attn / attn.c_proj / mlp.c_fc / mlp.c_proj are
//     ladder's h.<l>.attn.qkv / attn.proj / mlp.fc / mlp.proj, HF's
//     wte.weight and wpe.weight (nn.Embedding parameters) ladder's wte and
//     wpe; ln_1, ln_2 and ln_f are the same. A leading "transformer." (as
//     GPT2LMHeadModel saves them; GPT2Model's files have none) is accepted
//     and dropped.
//   - orientation: HF keeps those four weights as Conv1D, [in, out]; ladder's
//     matrices are [out, in], so they are transposed. q, k, v stay in that
//     order along the output dimension in both.
//   - vocabulary: HF's wte has vocab_size rows; ladder pads the table to a
//     multiple of 128 rows (GptConfig::padded_vocab) and the padding is zero.
//   - buffers: h.<l>.attn.bias and attn.masked_bias (the causal mask, not
//     weights) are ignored. lm_head.weight, where present, must equal wte
//     bit for bit (GPT-2 ties them); a different head is refused, since
//     ladder's model has no separate head.
//   - numbers: F32, F16 and BF16 tensors are widened to fp32 exactly.
// Anything else is refused with one line naming it: an activation other
// than GPT-2's tanh GELU, a LayerNorm epsilon other than ladder's 1e-5, an
// inner MLP width other than 4 * n_embd, a missing or unexpected tensor, a
// wrong shape or dtype.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/formats/safetensors.h"
#include "src/model/gpt_config.h"

namespace ladder {

// The model keys of an HF GPT-2 `config.json` (its text): n_layer, n_head,
// n_embd, n_positions (ladder's context), vocab_size, layer_norm_epsilon,
// activation_function, n_inner. InvalidArgument naming the key on a missing
// or unsupported value, or on JSON that does not parse.
absl::StatusOr<GptConfig> GptConfigFromHfJson(const std::string& json_text);

// All of the model's weights from an HF GPT-2 safetensors file, laid out by
// ParameterTable(GptParameterSpecs(cfg)) (total_floats() of them).
absl::StatusOr<std::vector<float>> GptWeightsFromHf(const SafetensorsFile& file,
                                                    const GptConfig& cfg);

// An HF GPT-2 `config.json` (its text) for `cfg`: GPT2LMHeadModel, the
// shape keys, GPT-2's LayerNorm epsilon and tanh GELU, tied embeddings, and
// bos/eos = `end_of_text` when it is a token id (>= 0).
std::string HfJsonFromGptConfig(const GptConfig& cfg, int end_of_text);

// `weights` (laid out as for GptWeightsFromHf) as the bytes of an HF GPT-2
// safetensors file, as GPT2LMHeadModel.save_pretrained writes it: F32,
// "transformer."-prefixed names, Conv1D weights [in, out], wte unpadded, no
// lm_head (tied) and no mask buffers, metadata {"format": "pt"}.
// GptWeightsFromHf reads it back bit for bit. InvalidArgument if `weights`
// is not the table's size.
absl::StatusOr<std::string> GptWeightsToHf(const GptConfig& cfg,
                                           const std::vector<float>& weights);

}  // namespace ladder
