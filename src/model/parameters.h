// The parameter table: every logical tensor of the model by name, shape and
// initialization, laid out back to back in one float buffer.
//
// The same table lays out the weights, their gradients and the optimizer
// moments, so "parameter i" means the same slice in every buffer. Logical
// tensors (not shards) are the unit: checkpoints, initialization and (later)
// tensor/pipeline sharding all speak in these names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/tensor.h"
#include "src/model/gpt_config.h"

namespace ladder {

enum class InitKind { kNormal, kZeros, kOnes };

struct ParamSpec {
  std::string name;            // e.g. "h.3.attn.qkv.weight" (GPT-2's names)
  std::vector<int64_t> shape;  // 1 or 2 dims; weights are [out, in]
  InitKind init = InitKind::kZeros;
  float init_std = 0.0f;       // for kNormal
  int64_t init_rows = -1;      // kNormal draws only the first rows (vocab padding stays 0)
  bool weight_decay = false;   // AdamW decays matrices only, not biases or LayerNorm

  int64_t numel() const;
};

// GPT-2's tensors in a fixed order: wte, wpe, then per layer ln_1, attn.qkv,
// attn.proj, ln_2, mlp.fc, mlp.proj, then ln_f. Init as GPT-2: N(0, 0.02),
// the two residual projections per layer N(0, 0.02 / sqrt(2 * n_layer)).
std::vector<ParamSpec> GptParameterSpecs(const GptConfig& cfg);

class ParameterTable {
 public:
  explicit ParameterTable(std::vector<ParamSpec> specs);

  int size() const { return static_cast<int>(specs_.size()); }
  const ParamSpec& spec(int i) const { return specs_[i]; }
  int64_t offset(int i) const { return offsets_[i]; }
  int64_t total_floats() const { return total_; }
  // Index of the named tensor, or NotFound.
  absl::StatusOr<int> Find(const std::string& name) const;
  // View of tensor i inside a buffer laid out by this table.
  Tensor View(float* base, int i) const;

  // Fills `base` with the initial weights. Tensor i draws from the Philox
  // stream (seed, i), element by element, so any slice of it can be drawn
  // alone and every parallel layout starts from identical weights.
  void Initialize(float* base, uint64_t seed) const;

 private:
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  int64_t total_ = 0;
};

// Named views of the GPT tensors in one buffer (weights or gradients).
struct LayerTensors {
  Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
  Tensor ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};
struct GptTensors {
  Tensor wte, wpe;
  std::vector<LayerTensors> layers;
  Tensor lnf_w, lnf_b;
};
// Binds views over a buffer laid out by GptParameterSpecs(cfg).
GptTensors BindGptTensors(const ParameterTable& table, float* base, const GptConfig& cfg);

}  // namespace ladder
