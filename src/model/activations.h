// The activation arena: every tensor the forward saves for the backward, and
// the backward's scratch, laid out in one buffer whose size is a pure function
// of (config, layout, batch, sequence length, slots). `ladder plan` and the
// trainer's memory report use the same function, so predicted and allocated
// memory agree.
//
// A pipeline schedule keeps several microbatches in flight on a stage (GPipe:
// all M; 1F1B: at most P - stage), so what the forward saves is laid out once
// per *slot*; the forward's and the backward's scratch exist once.
//
// Per transformer layer and microbatch of N = B T tokens the forward saves
//   N (4C + 12C') activations and N (NH' + 4) fp32 statistics
// (x, ln1, resid_mid, ln2: C each; qkv 3C', atty C', fch and fch_gelu 4C'
// each; attention lse NH'; two LayerNorm means and rstds). Activations take
// the storage dtype (4 bytes in fp32, 2 in bf16: backend.h "Precision");
// statistics are always fp32. Each tensor starts on a 16-byte boundary.
// Sequence parallelism (src/parallel/tensor_parallel/layers.h) keeps the
// LayerNorm regions (x, ln1, resid_mid, ln2 and the statistics) as N / tp
// rows each, N (4C/tp + 12C') and N (NH' + 4/tp) in all, and adds two
// [N, C] buffers of scratch the blocks' inputs and outputs pass through.
// Recomputation (Recompute) trades some of that memory for forward work in
// the backward.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/tensor.h"
#include "src/model/gpt_config.h"
#include "src/model/parameters.h"

namespace ladder {

// What the forward keeps for the backward (--recompute; GptParallel::recompute).
enum class Recompute {
  kNone,  // everything listed above
  // All but the GELU output fch_gelu (N 4C' per layer, the largest saved
  // tensor with fch): every layer's forward writes it into one shared
  // buffer, and the backward rebuilds it from fch, one GELU pass per layer
  // (llm.c's default).
  kGelu,
  // Only each layer's input x (N C): the backward redoes the layer's forward
  // up to the GELU, one layer at a time, in one shared layer of scratch.
  kLayer,
};
// "none", "gelu" or "layer"; InvalidArgument names anything else.
absl::StatusOr<Recompute> ParseRecompute(std::string_view name);
const char* RecomputeName(Recompute r);

// Shapes below are for one rank: with tensor parallelism of degree P, C' =
// C / P (its heads' width), NH' = NH / P and Vp' = Vp / P.
struct LayerActivations {
  // N = B T rows, or N / tp of them (a rank's sequence shard) in the
  // LayerNorm regions with sequence parallelism.
  Tensor x;                        // [B,T,C] layer input (residual stream)
  Tensor ln1, ln1_mean, ln1_rstd;  // [N,C], [N], [N]
  Tensor qkv;                      // [B,T,3C']
  Tensor atty, lse;                // [B,T,C'], [B,NH',T]
  Tensor resid_mid;                // [N,C] x + attention branch
  Tensor ln2, ln2_mean, ln2_rstd;  // [N,C], [N], [N]
  Tensor fch, fch_gelu;            // [N,4C'] MLP pre- and post-GELU
};

// What the forward of one microbatch saves on this rank's pipeline stage.
// The first layer's x is the stage input: the embedding on the first stage,
// the previous stage's residual stream (received into it) on the others.
// The tensors after the last layer exist on the last stage only.
struct SlotActivations {
  Tensor tokens, targets;  // [B,T] i32 (the batch, on the device)
  std::vector<LayerActivations> layers;
  Tensor x_final;                  // [N,C] residual stream after the last layer
  Tensor lnf, lnf_mean, lnf_rstd;  // final LayerNorm
  Tensor logits;                   // [N,Vp']; the backward turns it into dlogits in place
  Tensor losses;                   // [N]
  // Cross-entropy statistics [N] (backend.h): the logits' row max, the sum of
  // exp(logit - row_max), the target's logit, and lse = row_max + log(sum_exp),
  // which the backward reads. (`lse` here is the cross-entropy's; each layer's
  // `lse` is its attention's.)
  Tensor row_max, sum_exp, target_logit, lse;
  // The last Forward ran the loss's backward too (Backend::CrossEntropyFused
  // with this dloss): logits already hold their gradient.
  bool loss_fused = false;
  float fused_dloss = 0;
};

struct GptActivations {
  std::vector<SlotActivations> slots;
  // [B,T] i32 on the first stage: each token's position, 0..T-1 in every
  // sequence (the embedding's explicit positions). The same for every slot
  // and batch of this shape, so it is staged once per shape, not per step.
  Tensor positions;
  // Forward scratch, shared by the slots.
  Tensor branch;        // [N,C] attention / MLP branch output
  Tensor attn_scratch;  // naive attention's [B,NH,T,T] f32 (empty for flash)
  Tensor stage_out;     // [B,T,C] residual stream for the next stage (not on the last)
  // With Recompute::kLayer: the one layer whose activations exist at a time
  // (its x is borrowed from the slot's layer being run); with kGelu, only its
  // fch_gelu is set: the buffer every layer's GELU output shares; empty
  // otherwise.
  LayerActivations recompute;
  // Sequence parallelism: the [N, C] buffers a block's gathered input and a
  // reduce-scattered output pass through (tp::Group whole and partial);
  // empty otherwise.
  Tensor seq_whole, seq_partial;
  // Context parallelism over R ranks (empty otherwise): ring_positions
  // [R, T] i32, the positions of the tokens each rank of the ring holds
  // (the same for every sequence); ring [4, B, T, 3C'], two buffers of two
  // blocks each: keys and values in transit (packed as qkv) and, in the
  // backward, their gradient travelling with them.
  Tensor ring_positions, ring;
  // Backward scratch (empty in an inference-only layout).
  Tensor d_resid;  // [B,T,C] gradient of the residual stream
  // [B,T,C], not on the last stage: where the gradient of the stage output
  // arrives from the next stage. Apart from d_resid (which the backward
  // works in, then sends back) so that the next gradient can be received
  // while the previous one is still being sent.
  Tensor grad_in;
  Tensor d_ln;     // [N,C] gradient of a LayerNorm output
  Tensor datty;    // [B,T,C']
  Tensor dqkv;     // [B,T,3C']
  Tensor dfch;     // [N,4C']
};

struct ActivationSizes {       // bytes
  int64_t slot_bytes = 0;      // saved by the forward, per slot
  int slots = 1;               // microbatches kept at once
  int64_t scratch_bytes = 0;   // forward scratch
  int64_t backward_bytes = 0;  // backward scratch
  int64_t total_bytes() const { return slots * slot_bytes + scratch_bytes + backward_bytes; }
};

// How a rank's activations are kept, beside its shard of the parameters.
struct ActivationOptions {
  bool backward = true;  // lay out the backward's scratch too (training)
  int slots = 1;         // microbatches kept at once
  Recompute recompute = Recompute::kNone;
  DType storage = DType::kF32;  // activations: f32 or bf16
  // Sequence parallelism: the LayerNorm regions split over the
  // tensor-parallel ranks (then tp divides B T).
  bool sequence_parallel = false;
  // Context parallelism over this many ranks: T is then the rank's share
  // of each sequence, and the ring attention's buffers are laid out.
  int context_parallel = 1;
};

// Lays out the activations of one rank of `layout` (its pipeline stage's
// layers, its tensor-parallel share of heads, MLP width and vocabulary) for
// microbatches of B sequences of T tokens in `arena` (a flat device buffer
// of at least total_bytes() bytes, 16-byte aligned, whose device the views
// carry; empty to only measure), as `options` say. Returns the sizes; fills
// *acts if non-null.
ActivationSizes LayoutActivations(const GptConfig& cfg, const ShardLayout& layout, int64_t B,
                                  int64_t T, const ActivationOptions& options, const Tensor& arena,
                                  GptActivations* acts);

}  // namespace ladder
