// Hugging Face GPT-2 -> ladder: a model with random values in every tensor
// (biases and LayerNorms included) is written in HF's layout by this test's
// own mapping (Conv1D weights transposed, wte unpadded, the causal-mask
// buffers and a tied lm_head present), read back by GptWeightsFromHf, and
// must equal the original weights bit for bit; each refusal names what was
// wrong.
#include "src/formats/hf_gpt2.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/core/bf16.h"
#include "src/core/philox.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

GptConfig TinyConfig() {
  GptConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 16;
  cfg.context = 12;
  cfg.vocab_size = 300;  // padded to 384 in ladder's table
  return cfg;
}

// HF's name of a ladder tensor, and whether HF stores it transposed.
std::pair<std::string, bool> HfName(const std::string& ladder) {
  if (ladder == "wte" || ladder == "wpe") return {ladder + ".weight", false};
  const std::pair<std::string, std::string> renames[] = {{".attn.qkv.", ".attn.c_attn."},
                                                         {".attn.proj.", ".attn.c_proj."},
                                                         {".mlp.fc.", ".mlp.c_fc."},
                                                         {".mlp.proj.", ".mlp.c_proj."}};
  for (const auto& [from, to] : renames) {
    const size_t at = ladder.find(from);
    if (at != std::string::npos) {
      const bool weight = ladder.size() > 7 && ladder.substr(ladder.size() - 7) == ".weight";
      return {ladder.substr(0, at) + to + ladder.substr(at + from.size()), weight};
    }
  }
  return {ladder, false};
}

// A model in both layouts: ladder's weights, and HF's tensors over owned bytes.
struct TwoLayouts {
  std::vector<float> ladder;
  std::map<std::string, std::vector<uint8_t>> bytes;  // HF name -> data
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> order;
  SafeDType dtype = SafeDType::kF32;

  void Add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values) {
    std::vector<uint8_t> data;
    for (float v : values) {
      if (dtype == SafeDType::kBF16) {
        const bf16 b = FloatToBf16(v);
        data.push_back(static_cast<uint8_t>(b & 0xff));
        data.push_back(static_cast<uint8_t>(b >> 8));
      } else {
        uint8_t raw[4];
        std::memcpy(raw, &v, 4);
        data.insert(data.end(), raw, raw + 4);
      }
    }
    bytes[name] = std::move(data);
    shapes[name] = std::move(shape);
    order.push_back(name);
  }
  void Drop(const std::string& name) { std::erase(order, name); }

  SafetensorsFile File() const {
    std::vector<SafetensorsTensor> tensors;
    for (const std::string& name : order) {
      const std::vector<uint8_t>& b = bytes.at(name);
      tensors.push_back({name, dtype, shapes.at(name), absl::MakeConstSpan(b)});
    }
    absl::StatusOr<std::string> text = SerializeSafetensors(tensors);
    EXPECT_TRUE(text.ok()) << text.status();
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(*text);
    EXPECT_TRUE(file.ok()) << file.status();
    return std::move(*file);
  }
};

TwoLayouts MakeModel(const GptConfig& cfg, SafeDType dtype, const std::string& prefix) {
  TwoLayouts m;
  m.dtype = dtype;
  const ParameterTable table(GptParameterSpecs(cfg));
  m.ladder.assign(table.total_floats(), 0.0f);
  PhiloxStream rng(7, kSyntheticDataStream);
  for (int i = 0; i < table.size(); ++i) {
    const ParamSpec& spec = table.spec(i);
    float* w = m.ladder.data() + table.offset(i);
    const int64_t rows = spec.name == "wte" ? cfg.vocab_size : spec.shape[0];
    const int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
    for (int64_t k = 0; k < rows * cols; ++k) {
      float v = rng.NextUniform() - 0.5f;
      if (dtype == SafeDType::kBF16) v = Bf16ToFloat(FloatToBf16(v));  // exact in the file
      w[k] = v;
    }
    const auto [hf, transposed] = HfName(spec.name);
    std::vector<float> values(w, w + rows * cols);
    std::vector<int64_t> shape = spec.shape;
    shape[0] = rows;
    if (transposed) {  // ladder [out, in] -> HF [in, out]
      for (int64_t o = 0; o < rows; ++o) {
        for (int64_t in = 0; in < cols; ++in) values[in * rows + o] = w[o * cols + in];
      }
      shape = {cols, rows};
    }
    m.Add(prefix + hf, shape, values);
    if (spec.name == "wte") m.Add("lm_head.weight", shape, values);  // tied, never prefixed
  }
  // The causal-mask buffers GPT2Model saves with every layer.
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = prefix + "h." + std::to_string(l) + ".attn.";
    m.Add(h + "bias", {1, 1, cfg.context, cfg.context},
          std::vector<float>(cfg.context * cfg.context, 1.0f));
    m.Add(h + "masked_bias", {}, {-1e4f});
  }
  return m;
}

void ExpectRefused(const absl::StatusOr<std::vector<float>>& got, const std::string& words) {
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(got.status().message()).find(words), std::string::npos)
      << got.status().message();
}

TEST(HfGpt2Test, Fp32WithPrefixEqualsTheOriginalBitForBit) {
  const GptConfig cfg = TinyConfig();
  TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "transformer.");
  absl::StatusOr<std::vector<float>> got = GptWeightsFromHf(m.File(), cfg);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), m.ladder.size());
  EXPECT_EQ(std::memcmp(got->data(), m.ladder.data(), m.ladder.size() * 4), 0);
}

TEST(HfGpt2Test, Bf16WithoutPrefixOrHeadEqualsTheOriginal) {
  const GptConfig cfg = TinyConfig();
  TwoLayouts m = MakeModel(cfg, SafeDType::kBF16, "");
  m.Drop("lm_head.weight");
  absl::StatusOr<std::vector<float>> got = GptWeightsFromHf(m.File(), cfg);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::memcmp(got->data(), m.ladder.data(), m.ladder.size() * 4), 0);
}

TEST(HfGpt2Test, ExportReadsBackBitForBitInHfsLayout) {
  const GptConfig cfg = TinyConfig();
  const TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "transformer.");
  absl::StatusOr<std::string> bytes = GptWeightsToHf(cfg, m.ladder);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  // The same tensors as GPT2LMHeadModel's file of the same weights, byte for
  // byte, without the mask buffers and the tied head.
  size_t weights = 0;
  for (const std::string& name : m.order) {
    if (name == "lm_head.weight" || name.find(".attn.bias") != std::string::npos ||
        name.find(".attn.masked_bias") != std::string::npos) {
      EXPECT_EQ(file->Find(name), nullptr) << name;
      continue;
    }
    const SafetensorsTensor* t = file->Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, SafeDType::kF32);
    EXPECT_EQ(t->shape, m.shapes.at(name)) << name;
    const std::vector<uint8_t>& want = m.bytes.at(name);
    ASSERT_EQ(t->bytes.size(), want.size()) << name;
    EXPECT_EQ(std::memcmp(t->bytes.data(), want.data(), want.size()), 0) << name;
    ++weights;
  }
  EXPECT_EQ(file->tensors().size(), weights);
  absl::StatusOr<std::vector<float>> back = GptWeightsFromHf(*file, cfg);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->data(), m.ladder.data(), m.ladder.size() * 4), 0);

  std::vector<float> short_weights(m.ladder.begin(), m.ladder.end() - 1);
  EXPECT_EQ(GptWeightsToHf(cfg, short_weights).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfGpt2Test, ExportedConfigReadsBack) {
  const GptConfig cfg = TinyConfig();
  absl::StatusOr<GptConfig> back = GptConfigFromHfJson(HfJsonFromGptConfig(cfg, 299));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToText(), cfg.ToText());
}

TEST(HfGpt2Test, RefusesWhatItCannotHold) {
  const GptConfig cfg = TinyConfig();
  {
    TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "");
    m.bytes["lm_head.weight"][5] ^= 1;
    ExpectRefused(GptWeightsFromHf(m.File(), cfg), "'lm_head.weight' differs from the token");
  }
  {
    TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "");
    m.Drop("h.1.mlp.c_fc.bias");
    ExpectRefused(GptWeightsFromHf(m.File(), cfg), "no tensor for h.1.mlp.fc.bias");
  }
  {
    TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "");
    m.shapes["h.0.attn.c_attn.weight"] = {48, 16};  // ladder's orientation, not Conv1D's
    ExpectRefused(GptWeightsFromHf(m.File(), cfg),
                  "'h.0.attn.c_attn.weight' is [48, 16], expected [16, 48]");
  }
  {
    TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "");
    m.Add("h.0.attn.proj.weight", {16, 16}, std::vector<float>(256, 0.0f));  // ladder's name
    ExpectRefused(GptWeightsFromHf(m.File(), cfg), "unexpected tensor 'h.0.attn.proj.weight'");
  }
  {
    TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "");
    m.Add("wte", {300, 16}, std::vector<float>(4800, 0.0f));  // ladder's name for the table
    ExpectRefused(GptWeightsFromHf(m.File(), cfg), "unexpected tensor 'wte'");
  }
  {
    TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "");
    m.Add("score.weight", {2, 16}, std::vector<float>(32, 0.0f));
    ExpectRefused(GptWeightsFromHf(m.File(), cfg), "unexpected tensor 'score.weight'");
  }
  {
    TwoLayouts m = MakeModel(cfg, SafeDType::kF32, "");
    m.Add("transformer.wpe.weight", {12, 16}, std::vector<float>(192, 0.0f));  // both spellings
    ExpectRefused(GptWeightsFromHf(m.File(), cfg), "appears twice");
  }
}

TEST(HfGpt2Test, ConfigKeys) {
  absl::StatusOr<GptConfig> cfg = GptConfigFromHfJson(
      R"({"n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024, "vocab_size": 50257,
          "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new", "n_inner": null,
          "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->n_layer, 12);
  EXPECT_EQ(cfg->n_head, 12);
  EXPECT_EQ(cfg->n_embd, 768);
  EXPECT_EQ(cfg->context, 1024);
  EXPECT_EQ(cfg->vocab_size, 50257);
  EXPECT_EQ(cfg->padded_vocab(), 50304);

  const std::string base =
      R"("n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 12, "vocab_size": 300)";
  const std::pair<std::string, std::string> refused[] = {
      {"{" + base + R"(, "activation_function": "relu"})", "activation_function \"relu\""},
      {"{" + base + R"(, "layer_norm_epsilon": 1e-06})", "layer_norm_epsilon"},
      {"{" + base + R"(, "n_inner": 48})", "n_inner 48"},
      {R"({"n_layer": 2, "n_embd": 16, "n_positions": 12, "vocab_size": 300})", "'n_head'"},
      {R"({"n_layer": 2, "n_head": -2, "n_embd": 16, "n_positions": 12, "vocab_size": 300})",
       "'n_head'"},
      {"[1, 2]", "not a JSON object"},
      {"{\"n_layer\": ", "not a JSON object"},
  };
  for (const auto& [json, words] : refused) {
    absl::StatusOr<GptConfig> bad = GptConfigFromHfJson(json);
    ASSERT_FALSE(bad.ok()) << json;
    EXPECT_NE(std::string(bad.status().message()).find(words), std::string::npos)
        << bad.status().message();
  }
}

}  // namespace
}  // namespace ladder
