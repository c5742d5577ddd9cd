// llm.c's model and tokenizer files into ladder's (llmc.h has the layouts).
#include "src/formats/llmc.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/bf16.h"
#include "src/core/status.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

constexpr int kHeaderInts = 256;
constexpr int32_t kModelMagic = 20240326, kTokenizerMagic = 20240328;
constexpr int32_t kModelFp32 = 3, kModelBf16 = 5;

int32_t HeaderInt(const std::string& contents, int i) {
  int32_t v;
  std::memcpy(&v, contents.data() + 4 * i, 4);
  return v;
}

}  // namespace

absl::StatusOr<LlmcModel> ParseLlmcModel(const std::string& contents, const std::string& path) {
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parts...));
  };
  if (contents.size() < 4 * kHeaderInts) return error("shorter than llm.c's 1024-byte header");
  if (HeaderInt(contents, 0) != kModelMagic) {
    return error("not an llm.c model file (magic ", HeaderInt(contents, 0), ", expected ",
                 kModelMagic, ")");
  }
  const int32_t version = HeaderInt(contents, 1);
  if (version != kModelFp32 && version != kModelBf16) {
    return error("version ", version, " (expected 3, fp32, or 5, bf16)");
  }
  LlmcModel m;
  GptConfig& cfg = m.config;
  cfg.context = HeaderInt(contents, 2);
  cfg.vocab_size = HeaderInt(contents, 3);
  cfg.n_layer = HeaderInt(contents, 4);
  cfg.n_head = HeaderInt(contents, 5);
  cfg.n_embd = HeaderInt(contents, 6);
  const int32_t padded = HeaderInt(contents, 7);
  if (absl::Status s = cfg.Validate(); !s.ok()) return error(s.message());
  if (padded != cfg.padded_vocab()) {
    return error("padded vocabulary ", padded, ", but ladder pads ", cfg.vocab_size, " to ",
                 cfg.padded_vocab());
  }
  const ParameterTable table(GptParameterSpecs(cfg));
  const int64_t n = table.total_floats();
  const int64_t width = version == kModelFp32 ? 4 : 2;
  if (static_cast<int64_t>(contents.size()) != 4 * kHeaderInts + n * width) {
    return error(contents.size(), " bytes, but a model of this shape has ",
                 4 * kHeaderInts + n * width);
  }
  std::vector<float> values(n);
  const char* data = contents.data() + 4 * kHeaderInts;
  for (int64_t i = 0; i < n; ++i) {
    if (version == kModelFp32) {
      std::memcpy(&values[i], data + 4 * i, 4);
    } else {
      bf16 b;
      std::memcpy(&b, data + 2 * i, 2);
      values[i] = Bf16ToFloat(b);
    }
  }
  // llm.c groups each kind of layer tensor over all layers: the k-th layer
  // tensor of layer l sits at group_start[k] + l * its size.
  const int64_t C = cfg.n_embd, L = cfg.n_layer;
  const char* kLayerTensors[] = {"ln_1.weight",      "ln_1.bias",       "attn.qkv.weight",
                                 "attn.qkv.bias",    "attn.proj.weight", "attn.proj.bias",
                                 "ln_2.weight",      "ln_2.bias",       "mlp.fc.weight",
                                 "mlp.fc.bias",      "mlp.proj.weight", "mlp.proj.bias"};
  const int64_t sizes[] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
  m.weights.assign(n, 0.0f);
  auto put = [&](const std::string& name, int64_t from, int64_t count) -> absl::Status {
    ASSIGN_OR_RETURN(int i, table.Find(name));
    std::copy_n(values.data() + from, count, m.weights.data() + table.offset(i));
    return absl::OkStatus();
  };
  int64_t at = 0;
  RETURN_IF_ERROR(put("wte", at, int64_t{cfg.padded_vocab()} * C));
  at += int64_t{cfg.padded_vocab()} * C;
  RETURN_IF_ERROR(put("wpe", at, int64_t{cfg.context} * C));
  at += int64_t{cfg.context} * C;
  for (int k = 0; k < 12; ++k) {
    for (int64_t l = 0; l < L; ++l) {
      RETURN_IF_ERROR(put(absl::StrCat("h.", l, ".", kLayerTensors[k]), at + l * sizes[k], sizes[k]));
    }
    at += L * sizes[k];
  }
  RETURN_IF_ERROR(put("ln_f.weight", at, C));
  RETURN_IF_ERROR(put("ln_f.bias", at + C, C));
  return m;
}

absl::StatusOr<Tokenizer> ParseLlmcTokenizer(const std::string& contents, const std::string& path) {
  auto error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parts...));
  };
  if (contents.size() < 4 * kHeaderInts) return error("shorter than llm.c's 1024-byte header");
  if (HeaderInt(contents, 0) != kTokenizerMagic) {
    return error("not an llm.c tokenizer file (magic ", HeaderInt(contents, 0), ", expected ",
                 kTokenizerMagic, ")");
  }
  const int32_t version = HeaderInt(contents, 1);
  if (version != 1 && version != 2) return error("version ", version, " (expected 1 or 2)");
  const int32_t size = HeaderInt(contents, 2);
  if (size < 256 || size > Tokenizer::kMaxVocabSize) {
    return error(size, " tokens, outside [256, ", Tokenizer::kMaxVocabSize, "]");
  }
  const int32_t end_of_text = version == 2 ? HeaderInt(contents, 3) : -1;
  std::vector<std::string> tokens;
  size_t at = 4 * kHeaderInts;
  for (int32_t id = 0; id < size; ++id) {
    if (at >= contents.size()) return error("ends before token ", id);
    const size_t length = static_cast<unsigned char>(contents[at++]);
    if (length == 0 || at + length > contents.size()) {
      return error("token ", id, ": length ", length, " is empty or runs past the end");
    }
    tokens.push_back(contents.substr(at, length));
    at += length;
  }
  if (at != contents.size()) return error(contents.size() - at, " bytes after the last token");
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromGpt2TokenBytes(std::move(tokens), end_of_text);
  if (!tok.ok()) return error(tok.status().message());
  return tok;
}

}  // namespace ladder
