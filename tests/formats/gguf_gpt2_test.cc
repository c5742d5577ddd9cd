// A ladder model exported as GGUF and read back with the GGUF reader: every
// key llama.cpp's GPT-2 loader reads, every tensor with its name, shape and
// type, and every value (F32 exact, F16 within half a step, Q8_0 within its
// block's bound); refusals name what was wrong.
#include "src/formats/gguf_gpt2.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/core/philox.h"
#include "src/formats/gguf.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

GptConfig Tiny(int n_embd) {
  GptConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = n_embd;
  cfg.context = 8;
  cfg.vocab_size = 256;  // the byte-level tokenizer's
  return cfg;
}

std::vector<float> RandomWeights(const GptConfig& cfg) {
  std::vector<float> w(ParameterTable(GptParameterSpecs(cfg)).total_floats());
  PhiloxStream rng(11, kSyntheticDataStream);
  for (float& x : w) x = rng.NextUniform() - 0.5f;
  return w;
}

template <typename T>
T Value(const GgufFile& f, const std::string& key) {
  const T* v = f.Get<T>(key);
  EXPECT_NE(v, nullptr) << key;
  return v != nullptr ? *v : T{};
}

void CheckExport(GgmlType type) {
  const GptConfig cfg = Tiny(64);
  const std::vector<float> w = RandomWeights(cfg);
  const Tokenizer tok = Tokenizer::ByteLevel();
  absl::StatusOr<std::string> bytes = GptToGguf(cfg, w, tok, type, "tiny");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<GgufFile> file = GgufFile::Parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = *file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(Value<std::string>(f, "general.architecture"), "gpt2");
  EXPECT_EQ(Value<std::string>(f, "general.name"), "tiny");
  EXPECT_EQ(Value<uint32_t>(f, "general.file_type"),
            type == GgmlType::kF32 ? 0u : type == GgmlType::kF16 ? 1u : 7u);
  EXPECT_EQ(Value<uint32_t>(f, "general.quantization_version"), 2u);
  EXPECT_EQ(Value<uint32_t>(f, "gpt2.context_length"), 8u);
  EXPECT_EQ(Value<uint32_t>(f, "gpt2.embedding_length"), 64u);
  EXPECT_EQ(Value<uint32_t>(f, "gpt2.feed_forward_length"), 256u);
  EXPECT_EQ(Value<uint32_t>(f, "gpt2.block_count"), 2u);
  EXPECT_EQ(Value<uint32_t>(f, "gpt2.attention.head_count"), 2u);
  EXPECT_EQ(Value<float>(f, "gpt2.attention.layer_norm_epsilon"), 1e-5f);
  EXPECT_EQ(Value<std::string>(f, "tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(Value<std::string>(f, "tokenizer.ggml.pre"), "gpt-2");
  const auto tokens = Value<std::vector<std::string>>(f, "tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 256u);
  EXPECT_EQ(tokens[' '], "\xC4\xA0");  // U+0120 'Ġ', GPT-2's spelling of a space
  EXPECT_EQ(tokens['a'], "a");
  EXPECT_EQ(Value<std::vector<int32_t>>(f, "tokenizer.ggml.token_type"),
            std::vector<int32_t>(256, 1));
  EXPECT_TRUE(Value<std::vector<std::string>>(f, "tokenizer.ggml.merges").empty());
  EXPECT_EQ(f.Find("tokenizer.ggml.eos_token_id"), nullptr);  // no end-of-text token
  EXPECT_EQ(f.metadata().size(), 15u);

  // Every tensor: ladder's [out, in] rows are ggml's {in, out}, unchanged.
  const ParameterTable table(GptParameterSpecs(cfg));
  ASSERT_EQ(f.tensors().size(), static_cast<size_t>(table.size()));
  const std::string names[] = {"token_embd.weight",        "position_embd.weight",
                               "blk.0.attn_norm.weight",   "blk.0.attn_norm.bias",
                               "blk.0.attn_qkv.weight",    "blk.0.attn_qkv.bias",
                               "blk.0.attn_output.weight", "blk.0.attn_output.bias",
                               "blk.0.ffn_norm.weight",    "blk.0.ffn_norm.bias",
                               "blk.0.ffn_up.weight",      "blk.0.ffn_up.bias",
                               "blk.0.ffn_down.weight",    "blk.0.ffn_down.bias"};
  for (int i = 0; i < 14; ++i) EXPECT_EQ(f.tensors()[i].name, names[i]);
  EXPECT_EQ(f.tensors().back().name, "output_norm.bias");
  EXPECT_EQ(f.FindTensor("output.weight"), nullptr);  // tied: llama.cpp uses token_embd
  for (int i = 0; i < table.size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    const ParamSpec& spec = table.spec(i);
    const bool matrix = spec.shape.size() == 2 && spec.name != "wpe";
    EXPECT_EQ(t.type, matrix ? type : GgmlType::kF32) << t.name;
    std::vector<int64_t> ne = {spec.shape.back()};
    if (spec.shape.size() == 2) ne.push_back(spec.name == "wte" ? cfg.vocab_size : spec.shape[0]);
    EXPECT_EQ(t.ne, ne) << t.name;
    absl::StatusOr<std::vector<float>> got = GgufTensorToFloats(t);
    ASSERT_TRUE(got.ok()) << got.status();
    const float* want = w.data() + table.offset(i);
    double worst = 0;
    for (size_t k = 0; k < got->size(); ++k) {
      worst = std::max(worst, std::abs(double{(*got)[k]} - want[k]));
    }
    // |w| < 0.5: F16 half a step is 2^-12. Q8_0 with d <= 0.5/127: half a
    // code, d/2, plus the codes' 127 times the scale's own fp16 rounding
    // (the codes are computed with the unrounded scale): 127 * d * 2^-11.
    const double d = 0.5 / 127;
    const double bound = t.type == GgmlType::kF32   ? 0
                         : t.type == GgmlType::kF16 ? std::ldexp(1.0, -12)
                                                    : d / 2 + 127 * d * std::ldexp(1.0, -11);
    EXPECT_LE(worst, bound) << t.name;
  }
}

TEST(GgufGpt2Test, F32) { CheckExport(GgmlType::kF32); }
TEST(GgufGpt2Test, F16) { CheckExport(GgmlType::kF16); }
TEST(GgufGpt2Test, Q8_0) { CheckExport(GgmlType::kQ8_0); }

TEST(GgufGpt2Test, Refusals) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  const GptConfig narrow = Tiny(48);  // rows of 48: not whole Q8_0 blocks
  absl::StatusOr<std::string> q8 = GptToGguf(narrow, RandomWeights(narrow), tok, GgmlType::kQ8_0, "x");
  ASSERT_FALSE(q8.ok());
  EXPECT_NE(std::string(q8.status().message()).find("token_embd.weight"), std::string::npos)
      << q8.status().message();
  EXPECT_TRUE(GptToGguf(narrow, RandomWeights(narrow), tok, GgmlType::kF16, "x").ok());
  const GptConfig cfg = Tiny(64);
  EXPECT_EQ(GptToGguf(cfg, RandomWeights(cfg), tok, GgmlType::kQ4_0, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> w = RandomWeights(cfg);
  w.pop_back();
  EXPECT_EQ(GptToGguf(cfg, w, tok, GgmlType::kF32, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ladder
