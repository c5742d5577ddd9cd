// The GGUF format's constants (version 3, the file format of llama.cpp and
// ggml), and the names llama.cpp gives a GPT-2 model's metadata keys and
// tensors. Every fact here was taken from llama.cpp's own sources; each is
// cited with the file it comes from ("llama.cpp:" paths are relative to the
// ggml-org/llama.cpp repository).
//
// File layout (llama.cpp: ggml/include/gguf.h, ggml/src/gguf.cpp). All
// integers little endian; all enums stored as 32-bit integers; bool as one
// byte (0 or 1); a string is a u64 byte count followed by the bytes, no NUL.
//
//   "GGUF"                         4 bytes of magic
//   u32 version                    3
//   i64 tensor_count               (written as u64 by gguf-py; never negative)
//   i64 kv_count
//   kv_count times:
//     string key                   non-empty, unique within the file
//     u32 value_type               GgufValueType
//     value                        a scalar, a string, or for kArray:
//                                  u32 element type (not kArray), u64 count,
//                                  count elements
//   tensor_count times (tensor info):
//     string name                  unique, shorter than GGML_MAX_NAME = 64
//                                  bytes (llama.cpp: ggml/include/ggml.h)
//     u32 n_dims                   at most GGML_MAX_DIMS = 4
//     i64 ne[n_dims]               ggml order: ne[0] varies fastest in memory
//     u32 type                     GgmlType
//     u64 offset                   relative to the data section's start
//   zero padding to a multiple of the alignment
//   data section                   each tensor's bytes, each padded with zeros
//                                  to a multiple of the alignment
//
// The alignment is the u32 value of "general.alignment" (a power of two) or
// 32 when the key is absent. gguf.cpp's reader demands that the tensors lie
// in the data section in info order, packed: tensor i's offset is the sum of
// the padded sizes of tensors 0..i-1 ("tensor '%s' has offset %" ... ",
// expected %zu"); its writer pads after every tensor, the last included.
// A tensor's row (ne[0] elements) must be a whole number of its type's
// blocks. gguf.cpp accepts versions 2 and 3 (refusing 1); this project
// writes and reads only 3.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ladder {

inline constexpr char kGgufMagic[4] = {'G', 'G', 'U', 'F'};  // llama.cpp: gguf.h GGUF_MAGIC
inline constexpr uint32_t kGgufVersion = 3;                  // llama.cpp: gguf.h GGUF_VERSION
// Without "general.alignment" (llama.cpp: gguf.h GGUF_DEFAULT_ALIGNMENT).
inline constexpr uint32_t kGgufDefaultAlignment = 32;
// GGML_MAX_DIMS and GGML_MAX_NAME (llama.cpp: ggml/include/ggml.h); a name
// must be shorter than kGgmlMaxName bytes (the C buffer holds the NUL).
inline constexpr uint32_t kGgmlMaxDims = 4;
inline constexpr size_t kGgmlMaxName = 64;
// The reader's limits on one string and one array (gguf.cpp's
// GGUF_MAX_STRING_LENGTH and GGUF_MAX_ARRAY_ELEMENTS), checked besides the
// bytes left in the file.
inline constexpr uint64_t kGgufMaxStringBytes = uint64_t{1} << 30;
inline constexpr uint64_t kGgufMaxArrayElements = uint64_t{1} << 30;

// Metadata value types (llama.cpp: gguf.h enum gguf_type; gguf-py
// constants.py GGUFValueType).
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
inline constexpr uint32_t kGgufValueTypeCount = 13;

// "u32", "string", "array", ...; "unknown" for a value outside the enum.
inline const char* GgufValueTypeName(GgufValueType t) {
  // clang-format off
  switch (t) {
    case GgufValueType::kU8: return "u8";
    case GgufValueType::kI8: return "i8";
    case GgufValueType::kU16: return "u16";
    case GgufValueType::kI16: return "i16";
    case GgufValueType::kU32: return "u32";
    case GgufValueType::kI32: return "i32";
    case GgufValueType::kF32: return "f32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "u64";
    case GgufValueType::kI64: return "i64";
    case GgufValueType::kF64: return "f64";
  }
  // clang-format on
  return "unknown";
}

// Tensor element types (llama.cpp: ggml/include/ggml.h enum ggml_type;
// gguf-py constants.py GGMLQuantizationType). Every type a GGUF file may
// hold is listed so that any llama.cpp file parses; this project writes and
// decodes F32, F16, BF16 and Q8_0. The numbers 4, 5, 31-33 and 36-38 are
// retired types that files no longer hold; they are not listed, and a file
// using one is refused.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// A type's name and block: `block_elems` consecutive elements of a row are
// stored in `block_bytes` bytes.
struct GgmlTypeInfo {
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};

// The block of every type (gguf-py constants.py GGML_QUANT_SIZES, QK_K =
// 256); nullopt for a number that is no GgmlType.
inline std::optional<GgmlTypeInfo> GgmlTypeInfoOf(GgmlType t) {
  constexpr int64_t K = 256;
  // clang-format off
  switch (t) {
    case GgmlType::kF32: return GgmlTypeInfo{"F32", 1, 4};
    case GgmlType::kF16: return GgmlTypeInfo{"F16", 1, 2};
    case GgmlType::kQ4_0: return GgmlTypeInfo{"Q4_0", 32, 2 + 16};
    case GgmlType::kQ4_1: return GgmlTypeInfo{"Q4_1", 32, 2 + 2 + 16};
    case GgmlType::kQ5_0: return GgmlTypeInfo{"Q5_0", 32, 2 + 4 + 16};
    case GgmlType::kQ5_1: return GgmlTypeInfo{"Q5_1", 32, 2 + 2 + 4 + 16};
    case GgmlType::kQ8_0: return GgmlTypeInfo{"Q8_0", 32, 2 + 32};
    case GgmlType::kQ8_1: return GgmlTypeInfo{"Q8_1", 32, 4 + 4 + 32};
    case GgmlType::kQ2_K: return GgmlTypeInfo{"Q2_K", K, 2 + 2 + K / 16 + K / 4};
    case GgmlType::kQ3_K: return GgmlTypeInfo{"Q3_K", K, 2 + K / 4 + K / 8 + 12};
    case GgmlType::kQ4_K: return GgmlTypeInfo{"Q4_K", K, 2 + 2 + K / 2 + 12};
    case GgmlType::kQ5_K: return GgmlTypeInfo{"Q5_K", K, 2 + 2 + K / 2 + K / 8 + 12};
    case GgmlType::kQ6_K: return GgmlTypeInfo{"Q6_K", K, 2 + K / 2 + K / 4 + K / 16};
    case GgmlType::kQ8_K: return GgmlTypeInfo{"Q8_K", K, 4 + K + K / 8};
    case GgmlType::kIQ2_XXS: return GgmlTypeInfo{"IQ2_XXS", K, 2 + K / 4};
    case GgmlType::kIQ2_XS: return GgmlTypeInfo{"IQ2_XS", K, 2 + K / 4 + K / 32};
    case GgmlType::kIQ3_XXS: return GgmlTypeInfo{"IQ3_XXS", K, 2 + K / 4 + K / 8};
    case GgmlType::kIQ1_S: return GgmlTypeInfo{"IQ1_S", K, 2 + K / 8 + K / 16};
    case GgmlType::kIQ4_NL: return GgmlTypeInfo{"IQ4_NL", 32, 2 + 16};
    case GgmlType::kIQ3_S: return GgmlTypeInfo{"IQ3_S", K, 2 + K / 4 + K / 8 + K / 32 + 4};
    case GgmlType::kIQ2_S: return GgmlTypeInfo{"IQ2_S", K, 2 + K / 4 + K / 16};
    case GgmlType::kIQ4_XS: return GgmlTypeInfo{"IQ4_XS", K, 2 + 2 + K / 2 + K / 64};
    case GgmlType::kI8: return GgmlTypeInfo{"I8", 1, 1};
    case GgmlType::kI16: return GgmlTypeInfo{"I16", 1, 2};
    case GgmlType::kI32: return GgmlTypeInfo{"I32", 1, 4};
    case GgmlType::kI64: return GgmlTypeInfo{"I64", 1, 8};
    case GgmlType::kF64: return GgmlTypeInfo{"F64", 1, 8};
    case GgmlType::kIQ1_M: return GgmlTypeInfo{"IQ1_M", K, K / 8 + K / 16 + K / 32};
    case GgmlType::kBF16: return GgmlTypeInfo{"BF16", 1, 2};
    case GgmlType::kTQ1_0: return GgmlTypeInfo{"TQ1_0", K, 2 + 4 * 13};
    case GgmlType::kTQ2_0: return GgmlTypeInfo{"TQ2_0", K, 2 + 64};
    case GgmlType::kMXFP4: return GgmlTypeInfo{"MXFP4", 32, 1 + 16};
  }
  // clang-format on
  return std::nullopt;
}

// Q8_0 (llama.cpp: ggml/src/ggml-common.h block_q8_0): blocks of 32
// consecutive row elements, each `ggml_half d; int8_t qs[32]` = 34 bytes,
// the fp16 scale first. Element j of a block is qs[j] * d. The reference
// quantizer (llama.cpp: ggml/src/ggml-quants.c quantize_row_q8_0_ref):
// amax = max |x_j|; d = amax / 127; id = d != 0 ? 1 / d : 0; the block
// stores fp16(d) and qs[j] = roundf(x_j * id) (half away from zero), all in
// float arithmetic. Note that qs are computed with the unrounded d.
inline constexpr int64_t kQ8_0BlockElems = 32;
inline constexpr int64_t kQ8_0BlockBytes = 34;

// ---------------------------------------------------------------------------
// Metadata keys (gguf-py constants.py class Keys).

inline constexpr char kGgufKeyArchitecture[] = "general.architecture";  // string
inline constexpr char kGgufKeyAlignment[] = "general.alignment";        // u32, power of 2
inline constexpr char kGgufKeyName[] = "general.name";                  // string
inline constexpr char kGgufKeyFileType[] = "general.file_type";         // u32 LlamaFileType
inline constexpr char kGgufKeyQuantizationVersion[] = "general.quantization_version";  // u32

// The value of general.quantization_version (gguf-py constants.py
// GGML_QUANT_VERSION, from ggml.h GGML_QNT_VERSION).
inline constexpr uint32_t kGgmlQuantVersion = 2;

// general.file_type values: the type most tensors have, "except 1d tensors"
// (gguf-py constants.py LlamaFileType, from llama.h llama_ftype).
enum class LlamaFileType : uint32_t {
  kAllF32 = 0,
  kMostlyF16 = 1,
  kMostlyQ8_0 = 7,
};

// Architecture keys are "{arch}." + suffix (gguf-py constants.py Keys.LLM
// and Keys.Attention); the gguf-py writer stores the lengths and counts as
// u32 and the epsilon as f32 (gguf_writer.py add_context_length,
// add_layer_norm_eps, ...), and llama.cpp's loader checks the type.
inline constexpr char kGpt2Arch[] = "gpt2";             // constants.py MODEL_ARCH_NAMES[GPT2]
inline constexpr char kGgufVocabSize[] = "vocab_size";  // u32
inline constexpr char kGgufContextLength[] = "context_length";                   // u32
inline constexpr char kGgufEmbeddingLength[] = "embedding_length";               // u32
inline constexpr char kGgufFeedForwardLength[] = "feed_forward_length";          // u32
inline constexpr char kGgufBlockCount[] = "block_count";                         // u32
inline constexpr char kGgufHeadCount[] = "attention.head_count";                 // u32
inline constexpr char kGgufLayerNormEpsilon[] = "attention.layer_norm_epsilon";  // f32

// "gpt2.context_length" from ("gpt2", kGgufContextLength).
inline std::string GgufArchKey(absl::string_view arch, absl::string_view suffix) {
  return absl::StrCat(arch, ".", suffix);
}

// Tokenizer keys (constants.py Keys.Tokenizer). A GPT-2 byte-level BPE
// vocabulary is model "gpt2" with the tokens (string array, id order),
// their types (i32 array of GgufTokenType), the merges (string array, each
// "left right", rank order) and the special ids (u32).
inline constexpr char kGgufKeyTokenizerModel[] = "tokenizer.ggml.model";             // string
inline constexpr char kGgufKeyTokenizerPre[] = "tokenizer.ggml.pre";                 // string
inline constexpr char kGgufKeyTokens[] = "tokenizer.ggml.tokens";                    // string[]
inline constexpr char kGgufKeyTokenType[] = "tokenizer.ggml.token_type";             // i32[]
inline constexpr char kGgufKeyMerges[] = "tokenizer.ggml.merges";                    // string[]
inline constexpr char kGgufKeyBosTokenId[] = "tokenizer.ggml.bos_token_id";          // u32
inline constexpr char kGgufKeyEosTokenId[] = "tokenizer.ggml.eos_token_id";          // u32
inline constexpr char kGgufKeyUnknownTokenId[] = "tokenizer.ggml.unknown_token_id";  // u32
inline constexpr char kGgufKeyPaddingTokenId[] = "tokenizer.ggml.padding_token_id";  // u32
inline constexpr char kGgufTokenizerModelGpt2[] = "gpt2";

// tokenizer.ggml.token_type values (constants.py TokenType).
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// ---------------------------------------------------------------------------
// Tensor names (constants.py TENSOR_NAMES) get ".weight" or ".bias". What a
// GPT-2 model holds and in what shape (llama.cpp: src/models/gpt2.cpp
// llama_model_gpt2::load_arch_tensors; ggml order, ne[0] first; n_embd_gqa
// is n_embd for GPT-2):
//
//   token_embd.weight          {n_embd, n_vocab}
//   position_embd.weight       {n_embd, n_ctx_train}   (n_ctx_train: context_length)
//   output_norm.weight, .bias  {n_embd}
//   output.weight              {n_embd, n_vocab}  optional: absent, token_embd is used
//   blk.{i}.attn_norm.weight, .bias   {n_embd}
//   blk.{i}.attn_qkv.weight    {n_embd, 3 n_embd}   .bias {3 n_embd}
//   blk.{i}.attn_output.weight {n_embd, n_embd}     .bias {n_embd}
//   blk.{i}.ffn_norm.weight, .bias    {n_embd}
//   blk.{i}.ffn_up.weight      {n_embd, n_ff}       .bias {n_ff}
//   blk.{i}.ffn_down.weight    {n_ff, n_embd}       .bias {n_embd}
//
// A weight {in, out} is stored as out rows of in elements: row r holds the
// weights into output r (the PyTorch nn.Linear layout; convert_hf_to_gguf.py
// GPT2Model transposes Hugging Face's Conv1D c_attn/c_proj/c_fc weights,
// which are [in, out], to get it), so the fused qkv rows come in the order
// Hugging Face's c_attn outputs them: q, k, v. convert_hf_to_gguf.py keeps
// in F32, whatever the
// requested type, every tensor of one dimension (norms, biases), every
// "_norm.weight", and position_embd (ModelBase.prepare_tensors); a type that
// cannot take a tensor's row length falls back to F16 there.
inline constexpr char kGgufTokenEmbd[] = "token_embd";
inline constexpr char kGgufPosEmbd[] = "position_embd";
inline constexpr char kGgufOutputNorm[] = "output_norm";
inline constexpr char kGgufOutput[] = "output";
inline constexpr char kGgufAttnNorm[] = "attn_norm";      // blk.{bid}.attn_norm
inline constexpr char kGgufAttnQkv[] = "attn_qkv";        // blk.{bid}.attn_qkv
inline constexpr char kGgufAttnOutput[] = "attn_output";  // blk.{bid}.attn_output
inline constexpr char kGgufFfnNorm[] = "ffn_norm";        // blk.{bid}.ffn_norm
inline constexpr char kGgufFfnUp[] = "ffn_up";            // blk.{bid}.ffn_up
inline constexpr char kGgufFfnDown[] = "ffn_down";        // blk.{bid}.ffn_down
inline constexpr char kGgufWeight[] = "weight";
inline constexpr char kGgufBias[] = "bias";

// "token_embd.weight" from (kGgufTokenEmbd, kGgufWeight).
inline std::string GgufTensorName(absl::string_view tensor, absl::string_view suffix) {
  return absl::StrCat(tensor, ".", suffix);
}
// "blk.3.ffn_up.bias" from (3, kGgufFfnUp, kGgufBias).
inline std::string GgufBlockTensorName(int bid, absl::string_view tensor,
                                       absl::string_view suffix) {
  return absl::StrCat("blk.", bid, ".", tensor, ".", suffix);
}

}  // namespace ladder
