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
  int layer = -1;
  auto matrix = [&](std::string name, int64_t out, int64_t in, float s, TpSplit split,
                    int blocks = 1) {
    ParamSpec p{std::move(name), {out, in}, InitKind::kNormal, s, -1, true};
    p.split = split;
    p.split_blocks = blocks;
    p.layer = layer;
    return p;
  };
  auto vector = [&](std::string name, int64_t n, InitKind init,
                    TpSplit split = TpSplit::kReplicated, int blocks = 1) {
    ParamSpec p{std::move(name), {n}, init, 0.0f, -1, false};
    p.split = split;
    p.split_blocks = blocks;
    p.layer = layer;
    return p;
  };
  std::vector<ParamSpec> specs;
  // The embedding is vocabulary-parallel and tied to the head, so the first
  // stage (lookup) and the last (logits) both hold it.
  ParamSpec wte = matrix("wte", cfg.padded_vocab(), C, std, TpSplit::kRows);
  wte.init_rows = cfg.vocab_size;
  wte.first_stage = wte.last_stage = true;
  specs.push_back(wte);
  ParamSpec wpe = matrix("wpe", cfg.context, C, std, TpSplit::kReplicated);
  wpe.first_stage = true;
  specs.push_back(wpe);
  for (layer = 0; layer < cfg.n_layer; ++layer) {
    const std::string h = absl::StrCat("h.", layer, ".");
    specs.push_back(vector(h + "ln_1.weight", C, InitKind::kOnes));
    specs.push_back(vector(h + "ln_1.bias", C, InitKind::kZeros));
    // Column-parallel: a rank computes its heads' q, k and v.
    specs.push_back(matrix(h + "attn.qkv.weight", 3 * C, C, std, TpSplit::kRows, 3));
    specs.push_back(vector(h + "attn.qkv.bias", 3 * C, InitKind::kZeros, TpSplit::kRows, 3));
    // Row-parallel: a rank projects its heads; the partial sums are all-reduced.
    specs.push_back(matrix(h + "attn.proj.weight", C, C, proj_std, TpSplit::kCols));
    specs.push_back(vector(h + "attn.proj.bias", C, InitKind::kZeros));
    specs.push_back(vector(h + "ln_2.weight", C, InitKind::kOnes));
    specs.push_back(vector(h + "ln_2.bias", C, InitKind::kZeros));
    specs.push_back(matrix(h + "mlp.fc.weight", 4 * C, C, std, TpSplit::kRows));
    specs.push_back(vector(h + "mlp.fc.bias", 4 * C, InitKind::kZeros, TpSplit::kRows));
    specs.push_back(matrix(h + "mlp.proj.weight", C, 4 * C, proj_std, TpSplit::kCols));
    specs.push_back(vector(h + "mlp.proj.bias", C, InitKind::kZeros));
  }
  layer = -1;
  ParamSpec lnf_w = vector("ln_f.weight", C, InitKind::kOnes);
  ParamSpec lnf_b = vector("ln_f.bias", C, InitKind::kZeros);
  lnf_w.last_stage = lnf_b.last_stage = true;
  specs.push_back(lnf_w);
  specs.push_back(lnf_b);
  return specs;
}

LayerRange StageLayers(int n_layer, int pp_size, int pp_rank) {
  const int base = n_layer / pp_size, extra = n_layer % pp_size;
  const int first = pp_rank * base + std::min(pp_rank, extra);
  return {first, first + base + (pp_rank < extra ? 1 : 0)};
}

ParameterTable::ParameterTable(std::vector<ParamSpec> specs)
    : ParameterTable(*Create(std::move(specs), ShardLayout{})) {}

absl::StatusOr<ParameterTable> ParameterTable::Create(std::vector<ParamSpec> specs,
                                                      const ShardLayout& layout) {
  if (layout.tp_size < 1 || layout.pp_size < 1 || layout.tp_rank < 0 ||
      layout.tp_rank >= layout.tp_size || layout.pp_rank < 0 || layout.pp_rank >= layout.pp_size) {
    return absl::InvalidArgumentError("invalid shard layout");
  }
  int n_layer = 0;
  for (const ParamSpec& s : specs) n_layer = std::max(n_layer, s.layer + 1);
  const LayerRange stage = StageLayers(n_layer, layout.pp_size, layout.pp_rank);
  if (stage.first >= stage.last && n_layer > 0) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline stage ", layout.pp_rank, " of ",
                                                   layout.pp_size, " would hold no layer (",
                                                   n_layer, " layers)"));
  }
  const bool first = layout.pp_rank == 0, last = layout.pp_rank == layout.pp_size - 1;
  ParameterTable t;
  t.layout_ = layout;
  for (int k = 0; k < static_cast<int>(specs.size()); ++k) {
    const ParamSpec& s = specs[k];
    const bool held = s.layer >= 0 ? (s.layer >= stage.first && s.layer < stage.last)
                                   : ((s.first_stage && first) || (s.last_stage && last));
    if (!held) continue;
    std::vector<int64_t> shape = s.shape;
    const int dim = s.split == TpSplit::kRows ? 0 : 1;
    if (s.split != TpSplit::kReplicated) {
      const int64_t parts = int64_t{layout.tp_size} * (dim == 0 ? s.split_blocks : 1);
      if (dim >= static_cast<int>(shape.size()) || shape[dim] % parts != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(s.name, ": dimension ", dim, " (",
                         dim < static_cast<int>(shape.size()) ? shape[dim] : 0,
                         ") does not split into ", parts, " equal parts"));
      }
      shape[dim] /= layout.tp_size;
    }
    Local local{k, shape, t.total_};
    t.total_ += t.numel_of(local);
    t.local_.push_back(std::move(local));
  }
  t.specs_ = std::move(specs);
  return t;
}

int64_t ParameterTable::numel_of(const Local& l) {
  int64_t n = 1;
  for (int64_t d : l.shape) n *= d;
  return n;
}

int64_t ParameterTable::numel(int i) const { return numel_of(local_[i]); }

absl::StatusOr<int> ParameterTable::Find(const std::string& name) const {
  for (int i = 0; i < size(); ++i) {
    if (spec(i).name == name) return i;
  }
  return absl::NotFoundError(absl::StrCat("no parameter named '", name, "'"));
}

Tensor ParameterTable::View(const Tensor& buffer, int i) const {
  return ViewAt(buffer, i, local_[i].offset);
}

Tensor ParameterTable::ViewAt(const Tensor& buffer, int i, int64_t at) const {
  const std::vector<int64_t>& shape = local_[i].shape;
  return shape.size() == 1 ? buffer.Slice(at, {shape[0]}) : buffer.Slice(at, {shape[0], shape[1]});
}

int64_t ParameterTable::LogicalRow(int i, int64_t r) const {
  const ParamSpec& s = spec(i);
  if (s.split != TpSplit::kRows) return r;
  // Dim 0 is split_blocks blocks, each cut into tp_size shards; this rank
  // holds shard tp_rank of every block, back to back.
  const int64_t block_rows = s.shape[0] / s.split_blocks;
  const int64_t shard_rows = block_rows / layout_.tp_size;
  return (r / shard_rows) * block_rows + layout_.tp_rank * shard_rows + r % shard_rows;
}

int64_t ParameterTable::LogicalColumnStart(int i) const {
  return spec(i).split == TpSplit::kCols ? layout_.tp_rank * local_[i].shape[1] : 0;
}

void ParameterTable::Initialize(float* base, uint64_t seed) const {
  for (int i = 0; i < size(); ++i) {
    const ParamSpec& s = spec(i);
    float* p = base + offset(i);
    const int64_t n = numel(i);
    if (s.init != InitKind::kNormal) {
      std::fill(p, p + n, s.init == InitKind::kOnes ? 1.0f : 0.0f);
      continue;
    }
    // Draw row by row at the logical positions this shard holds.
    const int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
    const int64_t local_cols = local_[i].shape.size() == 2 ? local_[i].shape[1] : 1;
    const int64_t rows = n / local_cols;
    const int64_t col0 = LogicalColumnStart(i);
    const uint64_t stream = kInitStream + static_cast<uint64_t>(logical_index(i));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t lr = LogicalRow(i, r);
      float* row = p + r * local_cols;
      if (s.init_rows >= 0 && lr >= s.init_rows) {
        std::fill(row, row + local_cols, 0.0f);
      } else {
        FillNormal(row, lr * cols + col0, local_cols, seed, stream, 0.0f, s.init_std);
      }
    }
  }
}

GptTensors BindGptTensors(const ParameterTable& table, const Tensor& buffer, const GptConfig& cfg) {
  return BindGptTensors(table, cfg, [&](int i) { return table.View(buffer, i); });
}

GptTensors BindGptTensors(const ParameterTable& table, const GptConfig& cfg,
                          const std::function<Tensor(int)>& view) {
  auto get = [&](const std::string& name) {
    absl::StatusOr<int> i = table.Find(name);
    return i.ok() ? view(*i) : Tensor();
  };
  GptTensors t;
  t.wte = get("wte");
  t.wpe = get("wpe");
  const ShardLayout& layout = table.layout();
  const LayerRange stage = StageLayers(cfg.n_layer, layout.pp_size, layout.pp_rank);
  for (int l = stage.first; l < stage.last; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    LayerTensors x;
    x.ln1_w = get(h + "ln_1.weight");
    x.ln1_b = get(h + "ln_1.bias");
    x.qkv_w = get(h + "attn.qkv.weight");
    x.qkv_b = get(h + "attn.qkv.bias");
    x.proj_w = get(h + "attn.proj.weight");
    x.proj_b = get(h + "attn.proj.bias");
    x.ln2_w = get(h + "ln_2.weight");
    x.ln2_b = get(h + "ln_2.bias");
    x.fc_w = get(h + "mlp.fc.weight");
    x.fc_b = get(h + "mlp.fc.bias");
    x.fcproj_w = get(h + "mlp.proj.weight");
    x.fcproj_b = get(h + "mlp.proj.bias");
    t.layers.push_back(x);
  }
  t.lnf_w = get("ln_f.weight");
  t.lnf_b = get("ln_f.bias");
  return t;
}

}  // namespace ladder
