// The parameter table: the tensors one rank holds, by name, shape and
// initialization, laid out back to back in one float buffer.
//
// The model is described by *logical* tensors (ParamSpec: GPT-2's names and
// full shapes). A rank of a parallel layout holds a *shard* of some of them:
// its pipeline stage's tensors, each cut along the tensor-parallel split
// (Megatron: column-parallel QKV and MLP-up split their output rows,
// row-parallel projections split their input columns, the embedding splits
// the vocabulary). The table lays out those local shards back to back; the
// same layout serves weights, gradients and optimizer moments, so "tensor i"
// is the same slice in every buffer. Each local tensor remembers which slice
// of its logical tensor it holds, so initialization (and checkpoints) work in
// logical coordinates whatever the layout.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/tensor.h"
#include "src/model/gpt_config.h"

namespace ladder {

enum class InitKind { kNormal, kZeros, kOnes };

// How tensor parallelism divides a logical tensor.
enum class TpSplit {
  kReplicated,  // every TP rank holds all of it (LayerNorm, row-parallel biases, wpe)
  kRows,        // dim 0 split: column-parallel outputs, the vocabulary
  kCols,        // dim 1 split: row-parallel inputs
};

struct ParamSpec {
  std::string name;            // e.g. "h.3.attn.qkv.weight" (GPT-2's names)
  std::vector<int64_t> shape;  // logical shape, 1 or 2 dims; weights are [out, in]
  InitKind init = InitKind::kZeros;
  float init_std = 0.0f;      // for kNormal
  int64_t init_rows = -1;     // kNormal draws only the first rows (vocab padding stays 0)
  bool weight_decay = false;  // AdamW decays matrices only, not biases or LayerNorm
  TpSplit split = TpSplit::kReplicated;
  // kRows of a fused matrix: dim 0 is `split_blocks` equal blocks (q, k, v)
  // and each block is split on its own, so a rank gets its heads of each.
  int split_blocks = 1;
  int layer = -1;            // transformer layer; -1 for wte, wpe, ln_f
  bool first_stage = false;  // held by the first pipeline stage (wte, wpe)
  bool last_stage = false;   // held by the last pipeline stage (wte: tied head, ln_f)

  int64_t numel() const;
};

// Where one rank sits in a tensor x pipeline layout (data parallelism
// replicates whole tables, so it does not appear here).
struct ShardLayout {
  int tp_size = 1, tp_rank = 0;
  int pp_size = 1, pp_rank = 0;
};

// Transformer layers [first, last) of pipeline stage `pp_rank`: contiguous,
// the remainder spread over the first stages.
struct LayerRange {
  int first, last;
};
LayerRange StageLayers(int n_layer, int pp_size, int pp_rank);

// GPT-2's tensors in a fixed order: wte, wpe, then per layer ln_1, attn.qkv,
// attn.proj, ln_2, mlp.fc, mlp.proj, then ln_f. Init as GPT-2: N(0, 0.02),
// the two residual projections per layer N(0, 0.02 / sqrt(2 * n_layer)).
std::vector<ParamSpec> GptParameterSpecs(const GptConfig& cfg);

class ParameterTable {
 public:
  // The whole model (one rank, no parallelism).
  explicit ParameterTable(std::vector<ParamSpec> specs);
  // The shards `layout` holds. InvalidArgument if a split does not divide
  // its dimension or the stage has no layer.
  static absl::StatusOr<ParameterTable> Create(std::vector<ParamSpec> specs,
                                               const ShardLayout& layout);

  // Local tensors (the shards this rank holds), in logical order.
  int size() const { return static_cast<int>(local_.size()); }
  const ParamSpec& spec(int i) const { return specs_[local_[i].logical]; }
  // Index of local tensor i among all logical tensors (its Philox stream).
  int logical_index(int i) const { return local_[i].logical; }
  // The StochasticRounding offset (backend.h) of element `index` of local
  // tensor i: (logical tensor << 40) + (tensor-parallel rank << 32) + index.
  // Keyed by the logical tensor rather than the buffer position, so the tied
  // embedding's two copies (first and last pipeline stage) and every
  // data-parallel replica round alike, whatever the layout of the buffer.
  int64_t RoundingOffset(int i, int64_t index) const {
    return (int64_t{logical_index(i)} << 40) + (int64_t{layout_.tp_rank} << 32) + index;
  }
  const std::vector<int64_t>& local_shape(int i) const { return local_[i].shape; }
  int64_t numel(int i) const;
  int64_t offset(int i) const { return local_[i].offset; }
  int64_t total_floats() const { return total_; }
  const ShardLayout& layout() const { return layout_; }
  // True for the last stage's copy of the tied embedding in a pipelined
  // model: the first stage holds the same values (the trainer all-reduces
  // their gradients over the embedding axis), so sums over the whole model
  // (gradient norm, logical weights) count the first stage's copy only.
  bool IsTiedCopy(int i) const {
    return layout_.pp_size > 1 && layout_.pp_rank == layout_.pp_size - 1 && spec(i).first_stage;
  }
  // Index of the named local tensor, or NotFound.
  absl::StatusOr<int> Find(const std::string& name) const;
  // View of local tensor i inside `buffer`, a flat f32 tensor laid out by
  // this table (at least total_floats() long), on buffer's device.
  Tensor View(const Tensor& buffer, int i) const;
  // Local tensor i's shape at element `at` of `buffer` (a buffer that holds
  // only part of the table, laid out its own way).
  Tensor ViewAt(const Tensor& buffer, int i, int64_t at) const;
  // The logical row of local row r of tensor i, and the first logical column
  // its local columns start at (a shard is a set of whole rows or a column
  // range of every row).
  int64_t LogicalRow(int i, int64_t r) const;
  int64_t LogicalColumnStart(int i) const;

  // Fills `base` with the initial weights. Logical tensor k draws from the
  // Philox stream (seed, kInitStream + k) element by element, so a shard
  // draws exactly its slice and every parallel layout starts identical.
  void Initialize(float* base, uint64_t seed) const;

 private:
  struct Local {
    int logical;
    std::vector<int64_t> shape;
    int64_t offset;
  };
  ParameterTable() = default;
  static int64_t numel_of(const Local& l);

  std::vector<ParamSpec> specs_;
  ShardLayout layout_;
  std::vector<Local> local_;
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
// Binds views over `buffer` (flat f32, laid out by `table`, on the device the
// views will carry); tensors the table does not hold stay empty, and
// `layers` has one entry per layer of the table's stage.
GptTensors BindGptTensors(const ParameterTable& table, const Tensor& buffer, const GptConfig& cfg);
// The same with each tensor's view from `view(i)` (local tensor i; an empty
// tensor leaves it empty): for tensors that do not share one buffer, as
// under parameter offload (src/model/layer_stream.h).
GptTensors BindGptTensors(const ParameterTable& table, const GptConfig& cfg,
                          const std::function<Tensor(int)>& view);

}  // namespace ladder
