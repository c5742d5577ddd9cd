#include "src/model/activations.h"

namespace ladder {
namespace {

// Hands out consecutive views of a buffer (or only counts, when base is null).
class Bump {
 public:
  explicit Bump(float* base) : base_(base) {}
  Tensor F32(std::initializer_list<int64_t> dims) {
    Tensor t(base_ ? base_ + used_ : nullptr, DType::kF32, dims);
    used_ += t.numel();
    return t;
  }
  // int32 tokens occupy float-sized slots of the same arena.
  Tensor I32(std::initializer_list<int64_t> dims) {
    Tensor t(base_ ? base_ + used_ : nullptr, DType::kI32, dims);
    used_ += t.numel();
    return t;
  }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

}  // namespace

ActivationSizes LayoutActivations(const GptConfig& cfg, const ShardLayout& layout, int64_t B,
                                  int64_t T, bool with_backward, float* base,
                                  GptActivations* acts) {
  GptActivations local;
  GptActivations& a = acts ? *acts : local;
  // Tensor parallelism splits heads, the MLP's hidden width and the
  // vocabulary; the residual stream [N, C] is whole on every rank.
  const int64_t tp = layout.tp_size;
  const int64_t C = cfg.n_embd, N = B * T, NH = cfg.n_head / tp, Vp = cfg.padded_vocab() / tp;
  const int64_t Cl = C / tp;  // this rank's attention width
  const LayerRange stage = StageLayers(cfg.n_layer, layout.pp_size, layout.pp_rank);
  Bump bump(base);
  a.tokens = bump.I32({B, T});
  a.targets = bump.I32({B, T});
  a.layers.assign(stage.last - stage.first, {});
  for (LayerActivations& l : a.layers) {
    l.x = bump.F32({B, T, C});
    l.ln1 = bump.F32({N, C});
    l.ln1_mean = bump.F32({N});
    l.ln1_rstd = bump.F32({N});
    l.qkv = bump.F32({B, T, 3 * Cl});
    l.atty = bump.F32({B, T, Cl});
    l.lse = bump.F32({B, NH, T});
    l.resid_mid = bump.F32({N, C});
    l.ln2 = bump.F32({N, C});
    l.ln2_mean = bump.F32({N});
    l.ln2_rstd = bump.F32({N});
    l.fch = bump.F32({N, 4 * Cl});
    l.fch_gelu = bump.F32({N, 4 * Cl});
  }
  a.x_final = bump.F32({N, C});
  a.lnf = bump.F32({N, C});
  a.lnf_mean = bump.F32({N});
  a.lnf_rstd = bump.F32({N});
  a.logits = bump.F32({N, Vp});
  a.losses = bump.F32({N});
  a.row_max = bump.F32({N});
  a.sum_exp = bump.F32({N});
  a.target_logit = bump.F32({N});
  a.lse = bump.F32({N});
  a.branch = bump.F32({N, C});
  const int64_t scratch = AttentionScratchFloats(cfg.attention, B, T, NH);
  a.attn_scratch = scratch > 0 ? bump.F32({scratch}) : Tensor();
  ActivationSizes sizes;
  sizes.forward_floats = bump.used();
  if (with_backward) {
    a.d_resid = bump.F32({B, T, C});
    a.d_ln = bump.F32({N, C});
    a.datty = bump.F32({B, T, Cl});
    a.dqkv = bump.F32({B, T, 3 * Cl});
    a.dfch = bump.F32({N, 4 * Cl});
  }
  sizes.backward_floats = bump.used() - sizes.forward_floats;
  return sizes;
}

}  // namespace ladder
