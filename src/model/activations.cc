#include "src/model/activations.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace ladder {
namespace {

// Hands out consecutive views of an arena (or only counts, when it is
// empty), each starting on a 16-byte boundary so the kernels' vector loads
// apply whatever the sizes before it. Activations take the storage dtype;
// statistics stay f32 (backend.h "Precision").
class Bump {
 public:
  Bump(const Tensor& arena, DType storage) : arena_(arena), storage_(storage) {}
  Tensor Act(std::initializer_list<int64_t> dims) { return Take(storage_, dims); }
  Tensor F32(std::initializer_list<int64_t> dims) { return Take(DType::kF32, dims); }
  Tensor I32(std::initializer_list<int64_t> dims) { return Take(DType::kI32, dims); }
  int64_t used() const { return used_; }

 private:
  static constexpr int64_t kAlign = 16;
  Tensor Take(DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t(arena_.empty() ? nullptr : static_cast<char*>(arena_.data) + used_, dtype, dims,
             arena_.device);
    used_ += (static_cast<int64_t>(t.bytes()) + kAlign - 1) / kAlign * kAlign;
    return t;
  }
  Tensor arena_;
  DType storage_;
  int64_t used_ = 0;  // bytes
};

// Everything a layer saves but its input x (and, with `gelu` false, its
// GELU output). The LayerNorm regions have Ns rows: N, or N / tp with
// sequence parallelism.
void LayOutLayer(Bump& bump, int64_t B, int64_t T, int64_t Ns, int64_t C, int64_t Cl, int64_t NH,
                 bool gelu, LayerActivations* layer) {
  LayerActivations& l = *layer;
  const int64_t N = B * T;
  l.ln1 = bump.Act({Ns, C});
  l.ln1_mean = bump.F32({Ns});
  l.ln1_rstd = bump.F32({Ns});
  l.qkv = bump.Act({B, T, 3 * Cl});
  l.atty = bump.Act({B, T, Cl});
  l.lse = bump.F32({B, NH, T});
  l.resid_mid = bump.Act({Ns, C});
  l.ln2 = bump.Act({Ns, C});
  l.ln2_mean = bump.F32({Ns});
  l.ln2_rstd = bump.F32({Ns});
  l.fch = bump.Act({N, 4 * Cl});
  if (gelu) l.fch_gelu = bump.Act({N, 4 * Cl});
}

}  // namespace

absl::StatusOr<Recompute> ParseRecompute(std::string_view name) {
  if (name == "none") return Recompute::kNone;
  if (name == "gelu") return Recompute::kGelu;
  if (name == "layer") return Recompute::kLayer;
  return absl::InvalidArgumentError(
      absl::StrCat("--recompute must be none, gelu or layer, got '", std::string(name), "'"));
}

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kGelu:
      return "gelu";
    case Recompute::kLayer:
      return "layer";
  }
  return "?";
}

ActivationSizes LayoutActivations(const GptConfig& cfg, const ShardLayout& layout, int64_t B,
                                  int64_t T, const ActivationOptions& options, const Tensor& arena,
                                  GptActivations* acts) {
  const int slots = options.slots;
  const Recompute recompute = options.recompute;
  GptActivations local;
  GptActivations& a = acts ? *acts : local;
  // Tensor parallelism splits heads, the MLP's hidden width and the
  // vocabulary; the residual stream [N, C] is whole on every rank, or with
  // sequence parallelism split into tp shards of Ns = N / tp rows.
  const int64_t tp = layout.tp_size;
  const int64_t C = cfg.n_embd, N = B * T, NH = cfg.n_head / tp, Vp = cfg.padded_vocab() / tp;
  const int64_t Cl = C / tp;  // this rank's attention width
  const bool split = options.sequence_parallel && tp > 1;
  const int64_t Ns = split ? N / tp : N;
  const LayerRange stage = StageLayers(cfg.n_layer, layout.pp_size, layout.pp_rank);
  const bool last_stage = layout.pp_rank == layout.pp_size - 1;
  Bump bump(arena, options.storage);
  // The residual stream's rows: [B,T,C] whole, [Ns,C] split.
  const auto stream = [&] { return split ? bump.Act({Ns, C}) : bump.Act({B, T, C}); };
  a.slots.assign(slots, {});
  for (SlotActivations& s : a.slots) {
    s.tokens = bump.I32({B, T});
    s.targets = bump.I32({B, T});
    s.layers.assign(stage.last - stage.first, {});
    for (LayerActivations& l : s.layers) {
      l.x = stream();
      if (recompute != Recompute::kLayer) {
        LayOutLayer(bump, B, T, Ns, C, Cl, NH, recompute == Recompute::kNone, &l);
      }
    }
    if (last_stage) {
      s.x_final = bump.Act({Ns, C});
      s.lnf = bump.Act({Ns, C});
      s.lnf_mean = bump.F32({Ns});
      s.lnf_rstd = bump.F32({Ns});
      s.logits = bump.Act({N, Vp});
      s.losses = bump.F32({N});
      s.row_max = bump.F32({N});
      s.sum_exp = bump.F32({N});
      s.target_logit = bump.F32({N});
      s.lse = bump.F32({N});
    }
  }
  ActivationSizes sizes;
  sizes.slots = slots;
  sizes.slot_bytes = slots > 0 ? bump.used() / slots : 0;
  const int64_t saved = bump.used();
  a.positions = layout.pp_rank == 0 ? bump.I32({B, T}) : Tensor();
  a.branch = bump.Act({Ns, C});
  const int64_t scratch = AttentionScratchFloats(cfg.attention, B, T, NH);
  a.attn_scratch = scratch > 0 ? bump.F32({scratch}) : Tensor();
  a.stage_out = last_stage ? Tensor() : stream();
  a.recompute = {};
  if (recompute == Recompute::kLayer) {
    LayOutLayer(bump, B, T, Ns, C, Cl, NH, true, &a.recompute);
  }
  if (recompute == Recompute::kGelu) a.recompute.fch_gelu = bump.Act({N, 4 * Cl});
  a.seq_whole = split ? bump.Act({N, C}) : Tensor();
  a.seq_partial = split ? bump.Act({N, C}) : Tensor();
  const int64_t R = options.context_parallel;
  a.ring_positions = R > 1 ? bump.I32({R, T}) : Tensor();
  a.ring = R > 1 ? bump.Act({4, B, T, 3 * Cl}) : Tensor();
  sizes.scratch_bytes = bump.used() - saved;
  if (options.backward) {
    a.d_resid = stream();
    a.grad_in = last_stage ? Tensor() : stream();
    a.d_ln = bump.Act({Ns, C});
    a.datty = bump.Act({B, T, Cl});
    a.dqkv = bump.Act({B, T, 3 * Cl});
    a.dfch = bump.Act({N, 4 * Cl});
  }
  sizes.backward_bytes = bump.used() - saved - sizes.scratch_bytes;
  return sizes;
}

}  // namespace ladder
