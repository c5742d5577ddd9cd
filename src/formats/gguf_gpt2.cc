// Ladder's GPT-2 as GGUF: names, types and keys (gguf_gpt2.h).
#include "src/formats/gguf_gpt2.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/core/status.h"
#include "src/formats/gguf.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

// llama.cpp's name of pre-tokenizer "gpt-2" (llama-vocab.cpp maps it to
// LLAMA_VOCAB_PRE_TYPE_GPT2: GPT-2's regex).
constexpr char kGpt2PreTokenizer[] = "gpt-2";

// The GGUF name of a ladder tensor ("h.3.mlp.fc.bias" -> "blk.3.ffn_up.bias").
std::string GgufNameOf(const std::string& ladder) {
  if (ladder == "wte") return GgufTensorName(kGgufTokenEmbd, kGgufWeight);
  if (ladder == "wpe") return GgufTensorName(kGgufPosEmbd, kGgufWeight);
  const std::vector<std::string> parts = absl::StrSplit(ladder, '.');
  const std::string& suffix = parts.back();  // weight or bias
  if (parts[0] == "ln_f") return GgufTensorName(kGgufOutputNorm, suffix);
  // h.<l>.<module...>.<suffix>
  static const std::map<std::string, const char*> kModules = {
      {"ln_1", kGgufAttnNorm},       {"attn.qkv", kGgufAttnQkv}, {"attn.proj", kGgufAttnOutput},
      {"ln_2", kGgufFfnNorm},        {"mlp.fc", kGgufFfnUp},     {"mlp.proj", kGgufFfnDown},
  };
  std::string module = parts[2];
  for (size_t i = 3; i + 1 < parts.size(); ++i) module += "." + parts[i];
  return GgufBlockTensorName(std::stoi(parts[1]), kModules.at(module), suffix);
}

}  // namespace

absl::StatusOr<std::string> GptToGguf(const GptConfig& cfg, const std::vector<float>& weights,
                                      const Tokenizer& tokenizer, GgmlType type,
                                      const std::string& name) {
  LlamaFileType file_type;
  switch (type) {
    case GgmlType::kF32:
      file_type = LlamaFileType::kAllF32;
      break;
    case GgmlType::kF16:
      file_type = LlamaFileType::kMostlyF16;
      break;
    case GgmlType::kQ8_0:
      file_type = LlamaFileType::kMostlyQ8_0;
      break;
    default:
      return absl::InvalidArgumentError("GGUF export: the type must be f32, f16 or q8_0");
  }
  const ParameterTable table(GptParameterSpecs(cfg));
  if (static_cast<int64_t>(weights.size()) != table.total_floats()) {
    return absl::InvalidArgumentError(absl::StrCat("GGUF export: ", weights.size(),
                                                   " weights, but the model has ",
                                                   table.total_floats()));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> tokens, tokenizer.Gpt2Tokens());

  // The tensors llama.cpp's GPT-2 takes, by name, with their shapes.
  std::map<std::string, Gpt2GgufTensorSpec> wanted;
  for (Gpt2GgufTensorSpec& s : Gpt2GgufTensors(cfg.vocab_size, cfg.context, cfg.n_embd,
                                                4 * int64_t{cfg.n_embd}, cfg.n_layer,
                                                /*separate_output=*/false)) {
    wanted.emplace(s.name, std::move(s));
  }
  std::vector<std::vector<uint8_t>> data(table.size());  // owns what the tensors view
  std::vector<GgufTensor> tensors;
  for (int i = 0; i < table.size(); ++i) {
    const std::string gguf_name = GgufNameOf(table.spec(i).name);
    const Gpt2GgufTensorSpec& spec = wanted.at(gguf_name);  // every ladder tensor has one
    int64_t n = 1;
    for (int64_t d : spec.ne) n *= d;  // wte: the real rows only
    const GgmlType t = spec.keep_f32 ? GgmlType::kF32 : type;
    ASSIGN_OR_RETURN(data[i], GgufEncode(gguf_name, t, spec.ne,
                                         absl::MakeConstSpan(weights.data() + table.offset(i),
                                                             static_cast<size_t>(n))));
    tensors.push_back({gguf_name, t, spec.ne, absl::MakeConstSpan(data[i])});
  }

  std::vector<int32_t> token_types(tokens.size(), static_cast<int32_t>(GgufTokenType::kNormal));
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  std::vector<GgufKeyValue> metadata = {
      {kGgufKeyArchitecture, std::string(kGpt2Arch)},
      {kGgufKeyName, name},
      {kGgufKeyFileType, static_cast<uint32_t>(file_type)},
      {kGgufKeyQuantizationVersion, kGgmlQuantVersion},
      {GgufArchKey(kGpt2Arch, kGgufContextLength), u32(cfg.context)},
      {GgufArchKey(kGpt2Arch, kGgufEmbeddingLength), u32(cfg.n_embd)},
      {GgufArchKey(kGpt2Arch, kGgufFeedForwardLength), u32(4 * int64_t{cfg.n_embd})},
      {GgufArchKey(kGpt2Arch, kGgufBlockCount), u32(cfg.n_layer)},
      {GgufArchKey(kGpt2Arch, kGgufHeadCount), u32(cfg.n_head)},
      {GgufArchKey(kGpt2Arch, kGgufLayerNormEpsilon), 1e-5f},  // ladder's LayerNorm
      {kGgufKeyTokenizerModel, std::string(kGgufTokenizerModelGpt2)},
      {kGgufKeyTokenizerPre, std::string(kGpt2PreTokenizer)},
  };
  if (tokenizer.end_of_text() >= 0) {
    token_types[tokenizer.end_of_text()] = static_cast<int32_t>(GgufTokenType::kControl);
  }
  metadata.push_back({kGgufKeyTokens, std::move(tokens)});
  metadata.push_back({kGgufKeyTokenType, std::move(token_types)});
  metadata.push_back({kGgufKeyMerges, tokenizer.Gpt2Merges()});
  if (tokenizer.end_of_text() >= 0) {
    metadata.push_back({kGgufKeyBosTokenId, u32(tokenizer.end_of_text())});
    metadata.push_back({kGgufKeyEosTokenId, u32(tokenizer.end_of_text())});
  }
  return SerializeGguf(metadata, tensors);
}

}  // namespace ladder
