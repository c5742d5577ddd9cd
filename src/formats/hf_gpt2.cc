// HF GPT-2 -> ladder: the config's keys and the weights' names, orientation
// and padding (hf_gpt2.h says what differs).
#include "src/formats/hf_gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "src/core/status.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

using Json = nlohmann::json;

constexpr double kLadderLayerNormEps = 1e-5;  // the backends' LayerNorm
constexpr char kPrefix[] = "transformer.";

absl::StatusOr<int> PositiveInt(const Json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 ||
      it->get<int64_t>() > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: '", key, "' must be a positive integer"));
  }
  return static_cast<int>(it->get<int64_t>());
}

// The layers HF and ladder name differently: {HF's infix, ladder's infix}.
// Their weights are Conv1D, [in, out], in HF's files.
constexpr std::pair<const char*, const char*> kRenamedLayers[] = {
    {".attn.c_attn.", ".attn.qkv."},
    {".attn.c_proj.", ".attn.proj."},
    {".mlp.c_fc.", ".mlp.fc."},
    {".mlp.c_proj.", ".mlp.proj."},
};

// A tensor's name on the other side, and whether HF stores it transposed.
struct Renamed {
  std::string name;
  bool transposed = false;
};
// to_ladder: an HF name (without the prefix) to ladder's; else the inverse.
Renamed Rename(const std::string& name, bool to_ladder) {
  // The embeddings are nn.Embedding modules in HF: their parameter is
  // "<name>.weight"; ladder names the tables themselves.
  if (to_ladder && (name == "wte.weight" || name == "wpe.weight")) return {name.substr(0, 3)};
  if (!to_ladder && (name == "wte" || name == "wpe")) return {name + ".weight"};
  for (const auto& [hf, ladder] : kRenamedLayers) {
    const char* from = to_ladder ? hf : ladder;
    const char* to = to_ladder ? ladder : hf;
    const size_t at = name.find(from);
    if (at == std::string::npos) continue;
    return {name.substr(0, at) + to + name.substr(at + std::strlen(from)),
            absl::EndsWith(name, ".weight")};
  }
  return {name};
}

// Ladder's names of the renamed tensors (HF never writes them).
bool IsLadderOnlyName(const std::string& name) {
  if (name == "wte" || name == "wpe") return true;
  for (const auto& [hf, ladder] : kRenamedLayers) {
    if (name.find(ladder) != std::string::npos) return true;
  }
  return false;
}

// HF's buffers that are not weights: the causal mask of each layer.
bool IsIgnoredBuffer(const std::string& name) {
  return absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias");
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<GptConfig> GptConfigFromHfJson(const std::string& json_text) {
  Json config = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("config.json: not a JSON object");
  }
  GptConfig cfg;
  ASSIGN_OR_RETURN(cfg.n_layer, PositiveInt(config, "n_layer"));
  ASSIGN_OR_RETURN(cfg.n_head, PositiveInt(config, "n_head"));
  ASSIGN_OR_RETURN(cfg.n_embd, PositiveInt(config, "n_embd"));
  ASSIGN_OR_RETURN(cfg.context, PositiveInt(config, "n_positions"));
  ASSIGN_OR_RETURN(cfg.vocab_size, PositiveInt(config, "vocab_size"));
  if (const auto it = config.find("layer_norm_epsilon"); it != config.end()) {
    if (!it->is_number() ||
        std::abs(it->get<double>() - kLadderLayerNormEps) > 1e-6 * kLadderLayerNormEps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: layer_norm_epsilon ", it->dump(), " is not supported (ladder's is 1e-05)"));
    }
  }
  if (const auto it = config.find("activation_function"); it != config.end()) {
    // GPT-2's "gelu_new" is the tanh approximation ladder computes;
    // "gelu_pytorch_tanh" is the same function under another name.
    if (!it->is_string() ||
        (it->get<std::string>() != "gelu_new" && it->get<std::string>() != "gelu_pytorch_tanh")) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: activation_function ", it->dump(),
                       " is not supported (ladder computes GPT-2's tanh GELU, \"gelu_new\")"));
    }
  }
  if (const auto it = config.find("n_inner"); it != config.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() != 4 * int64_t{cfg.n_embd}) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: n_inner ", it->dump(),
                                                     " is not supported (ladder's MLP is 4 * "
                                                     "n_embd = ",
                                                     4 * cfg.n_embd, " wide)"));
    }
  }
  RETURN_IF_ERROR(cfg.Validate());
  return cfg;
}

absl::StatusOr<std::vector<float>> GptWeightsFromHf(const SafetensorsFile& file,
                                                    const GptConfig& cfg) {
  // The file's tensors by ladder's name.
  struct Found {
    const SafetensorsTensor* tensor;
    bool transposed;
  };
  std::map<std::string, Found> by_name;
  const SafetensorsTensor* lm_head = nullptr;
  for (const SafetensorsTensor& t : file.tensors()) {
    std::string name = t.name;
    if (absl::StartsWith(name, kPrefix)) name = name.substr(std::strlen(kPrefix));
    if (IsIgnoredBuffer(name)) continue;
    if (name == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    Renamed ladder = Rename(name, /*to_ladder=*/true);
    if (ladder.name == name && IsLadderOnlyName(name)) {
      // ladder's own spelling, which HF never writes: its orientation is
      // unknowable (attn.proj is square), so it is not guessed.
      return absl::InvalidArgumentError(absl::StrCat("model.safetensors: unexpected tensor '",
                                                     t.name, "' (not GPT-2's Hugging Face name)"));
    }
    if (!by_name.emplace(ladder.name, Found{&t, ladder.transposed}).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.safetensors: '", t.name, "' appears twice (with and without '",
                       kPrefix, "')"));
    }
  }

  const ParameterTable table(GptParameterSpecs(cfg));
  std::vector<float> weights(table.total_floats(), 0.0f);
  std::set<std::string> used;
  for (int i = 0; i < table.size(); ++i) {
    const ParamSpec& spec = table.spec(i);
    const auto it = by_name.find(spec.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.safetensors: no tensor for ", spec.name));
    }
    const SafetensorsTensor& t = *it->second.tensor;
    // The shape HF stores: wte unpadded, Conv1D weights [in, out].
    std::vector<int64_t> expected = spec.shape;
    if (spec.name == "wte") expected[0] = cfg.vocab_size;
    if (it->second.transposed) std::swap(expected[0], expected[1]);
    if (t.shape != expected) {
      return absl::InvalidArgumentError(absl::StrCat("model.safetensors: '", t.name, "' is ",
                                                     ShapeText(t.shape), ", expected ",
                                                     ShapeText(expected)));
    }
    ASSIGN_OR_RETURN(std::vector<float> values, SafetensorsToFloats(t));
    float* out = weights.data() + table.offset(i);
    if (it->second.transposed) {
      const int64_t in = expected[0], outs = expected[1];  // HF [in, out] -> ladder [out, in]
      for (int64_t r = 0; r < in; ++r) {
        for (int64_t c = 0; c < outs; ++c) out[c * in + r] = values[r * outs + c];
      }
    } else {
      std::copy(values.begin(), values.end(), out);  // wte's padding rows stay zero
    }
    used.insert(spec.name);
  }
  for (const auto& [name, found] : by_name) {
    if (!used.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat("model.safetensors: unexpected tensor '",
                                                     found.tensor->name,
                                                     "' (not part of GPT-2)"));
    }
  }
  if (lm_head != nullptr) {
    // Against wte's rows as already converted into `weights` (wte's shape
    // was checked above: [vocab_size, n_embd], at the table's offset of wte).
    const auto differs = absl::InvalidArgumentError(
        absl::StrCat("model.safetensors: '", lm_head->name,
                     "' differs from the token embedding; ladder ties the output head to wte, "
                     "as GPT-2 does, and cannot hold a separate one"));
    if (lm_head->shape != by_name.at("wte").tensor->shape) return differs;
    ASSIGN_OR_RETURN(std::vector<float> head, SafetensorsToFloats(*lm_head));
    ASSIGN_OR_RETURN(const int wte, table.Find("wte"));
    if (std::memcmp(head.data(), weights.data() + table.offset(wte),
                    head.size() * sizeof(float)) != 0) {
      return differs;
    }
  }
  return weights;
}

std::string HfJsonFromGptConfig(const GptConfig& cfg, int end_of_text) {
  Json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"n_layer", cfg.n_layer},
      {"n_head", cfg.n_head},
      {"n_embd", cfg.n_embd},
      {"n_positions", cfg.context},
      {"n_ctx", cfg.context},
      {"n_inner", nullptr},
      {"vocab_size", cfg.vocab_size},
      {"layer_norm_epsilon", kLadderLayerNormEps},
      {"activation_function", "gelu_new"},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
  };
  if (end_of_text >= 0) {
    config["bos_token_id"] = end_of_text;
    config["eos_token_id"] = end_of_text;
  }
  return config.dump(2) + "\n";
}

absl::StatusOr<std::string> GptWeightsToHf(const GptConfig& cfg,
                                           const std::vector<float>& weights) {
  const ParameterTable table(GptParameterSpecs(cfg));
  if (static_cast<int64_t>(weights.size()) != table.total_floats()) {
    return absl::InvalidArgumentError(absl::StrCat("export: ", weights.size(),
                                                   " weights, but the model has ",
                                                   table.total_floats()));
  }
  std::vector<std::vector<float>> data(table.size());  // owns what the spans view
  std::vector<SafetensorsTensor> tensors;
  for (int i = 0; i < table.size(); ++i) {
    const ParamSpec& spec = table.spec(i);
    const Renamed hf = Rename(spec.name, /*to_ladder=*/false);
    std::vector<int64_t> shape = spec.shape;
    if (spec.name == "wte") shape[0] = cfg.vocab_size;  // without the padding rows
    const float* w = weights.data() + table.offset(i);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float>& out = data[i];
    out.assign(w, w + n);
    if (hf.transposed) {  // ladder [out, in] -> HF [in, out]
      const int64_t outs = shape[0], in = shape[1];
      for (int64_t o = 0; o < outs; ++o) {
        for (int64_t c = 0; c < in; ++c) out[c * outs + o] = w[o * in + c];
      }
      shape = {in, outs};
    }
    tensors.push_back({kPrefix + hf.name, SafeDType::kF32, shape,
                       absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(out.data()),
                                           out.size() * sizeof(float))});
  }
  return SerializeSafetensors(tensors, {{"format", "pt"}});
}

}  // namespace ladder
