#include "src/model/parameters.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/core/philox.h"

namespace ladder {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParamSpec> GptParameterSpecs(const GptConfig& cfg) {
  const int64_t C = cfg.n_embd;
  const float std = 0.02f;
  const float proj_std = std / std::sqrt(2.0f * cfg.n_layer);
  auto matrix = [](std::string name, int64_t out, int64_t in, float s) {
    return ParamSpec{std::move(name), {out, in}, InitKind::kNormal, s, -1, true};
  };
  auto vector = [](std::string name, int64_t n, InitKind init) {
    return ParamSpec{std::move(name), {n}, init, 0.0f, -1, false};
  };
  std::vector<ParamSpec> specs;
  ParamSpec wte = matrix("wte", cfg.padded_vocab(), C, std);
  wte.init_rows = cfg.vocab_size;
  specs.push_back(wte);
  specs.push_back(matrix("wpe", cfg.context, C, std));
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    specs.push_back(vector(h + "ln_1.weight", C, InitKind::kOnes));
    specs.push_back(vector(h + "ln_1.bias", C, InitKind::kZeros));
    specs.push_back(matrix(h + "attn.qkv.weight", 3 * C, C, std));
    specs.push_back(vector(h + "attn.qkv.bias", 3 * C, InitKind::kZeros));
    specs.push_back(matrix(h + "attn.proj.weight", C, C, proj_std));
    specs.push_back(vector(h + "attn.proj.bias", C, InitKind::kZeros));
    specs.push_back(vector(h + "ln_2.weight", C, InitKind::kOnes));
    specs.push_back(vector(h + "ln_2.bias", C, InitKind::kZeros));
    specs.push_back(matrix(h + "mlp.fc.weight", 4 * C, C, std));
    specs.push_back(vector(h + "mlp.fc.bias", 4 * C, InitKind::kZeros));
    specs.push_back(matrix(h + "mlp.proj.weight", C, 4 * C, proj_std));
    specs.push_back(vector(h + "mlp.proj.bias", C, InitKind::kZeros));
  }
  specs.push_back(vector("ln_f.weight", C, InitKind::kOnes));
  specs.push_back(vector("ln_f.bias", C, InitKind::kZeros));
  return specs;
}

ParameterTable::ParameterTable(std::vector<ParamSpec> specs) : specs_(std::move(specs)) {
  offsets_.reserve(specs_.size());
  for (const ParamSpec& s : specs_) {
    offsets_.push_back(total_);
    total_ += s.numel();
  }
}

absl::StatusOr<int> ParameterTable::Find(const std::string& name) const {
  for (int i = 0; i < size(); ++i) {
    if (specs_[i].name == name) return i;
  }
  return absl::NotFoundError(absl::StrCat("no parameter named '", name, "'"));
}

Tensor ParameterTable::View(float* base, int i) const {
  const ParamSpec& s = specs_[i];
  float* p = base + offsets_[i];
  return s.shape.size() == 1 ? Tensor::F32(p, {s.shape[0]})
                             : Tensor::F32(p, {s.shape[0], s.shape[1]});
}

void ParameterTable::Initialize(float* base, uint64_t seed) const {
  for (int i = 0; i < size(); ++i) {
    const ParamSpec& s = specs_[i];
    float* p = base + offsets_[i];
    const int64_t n = s.numel();
    switch (s.init) {
      case InitKind::kZeros:
        std::fill(p, p + n, 0.0f);
        break;
      case InitKind::kOnes:
        std::fill(p, p + n, 1.0f);
        break;
      case InitKind::kNormal: {
        const int64_t row = s.shape.size() == 2 ? s.shape[1] : 1;
        const int64_t drawn = s.init_rows < 0 ? n : s.init_rows * row;
        FillNormal(p, 0, drawn, seed, kInitStream + static_cast<uint64_t>(i), 0.0f, s.init_std);
        std::fill(p + drawn, p + n, 0.0f);
        break;
      }
    }
  }
}

GptTensors BindGptTensors(const ParameterTable& table, float* base, const GptConfig& cfg) {
  int i = 0;
  auto next = [&] { return table.View(base, i++); };
  GptTensors t;
  t.wte = next();
  t.wpe = next();
  t.layers.resize(cfg.n_layer);
  for (LayerTensors& l : t.layers) {
    l.ln1_w = next();
    l.ln1_b = next();
    l.qkv_w = next();
    l.qkv_b = next();
    l.proj_w = next();
    l.proj_b = next();
    l.ln2_w = next();
    l.ln2_b = next();
    l.fc_w = next();
    l.fc_b = next();
    l.fcproj_w = next();
    l.fcproj_b = next();
  }
  t.lnf_w = next();
  t.lnf_b = next();
  return t;
}

}  // namespace ladder
