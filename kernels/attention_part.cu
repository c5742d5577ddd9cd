// Attention by positions, forward and backward, for fp32 or bf16 storage:
// one block of context parallelism's ring (Backend::AttentionPartForward and
// AttentionPartBackward).
//
// A rank holds Tq query tokens of each sequence and meets, one ring step at
// a time, blocks of Tk keys and values: its own, then the other ranks'.
// Positions say which pairs count (query i sees key j iff k_pos[j] <=
// q_pos[i]); they are explicit because a rank's tokens are not contiguous
// (an early and a late chunk of each sequence). Per (b, h), with Q the
// [Tq, HS] slice of q_qkv, K and V the [Tk, HS] slices of kv_qkv and
// scale = 1/sqrt(HS):
//     S = scale * Q K^T (masked)   P = softmax(S)   O = P V   lse2 = log sum exp S
// and, to merge with the partial result (out1, lse1) of the earlier steps,
//     lse = logaddexp(lse1, lse2)   out = out1 exp(lse1 - lse) + O exp(lse2 - lse).
// The backward of one block, from the FINAL out and lse (over all blocks):
//     P = exp(S - lse)     D = rowsum(dO * out)     dS = P * (dO V^T - D)
//     dQ += scale * dS K   dK += scale * dS^T Q     dV += P^T dO
// With the whole row's lse, P is the whole row's softmax restricted to the
// block, so the blocks' shares add up to causal attention's gradient.
//
// ---- what it fuses, and the bytes it moves ----------------------------------
// These are the flash kernels of kernels/attention_flash.cuh, which
// attention.cu's causal attention runs too (its comment explains the tiles,
// the launch shape and the online softmax), with PositionMask: Q and K/V
// come from two tensors; the mask compares positions instead of indices;
// the results combine with what the outputs hold. The forward fuses the scores, the mask,
// the online softmax, P V, the normalization and the log-sum-exp merge; the
// backward recomputes P from lse like attention.cu's.
// Bytes (HBM), e = 4 (fp32) or 2 (bf16) per stored element, lse and
// positions 4: the forward reads q of q_qkv and k, v of kv_qkv once,
// e*B*(Tq + 2*Tk)*C (K/V tiles that several query tiles read again come from
// L2), and writes out and lse, e*B*Tq*C + 4*B*NH*Tq; a merge first reads
// them too. The backward reads q, dout and out of the Tq queries and k, v of
// the Tk keys once, e*B*(3*Tq + 2*Tk)*C, and lse, 4*B*NH*Tq, and adds into
// the q part of dq_qkv and the k, v parts of dkv_qkv: a read and a write of
// each, 2*e*B*(Tq + 2*Tk)*C. Two tiles with no allowed pair (in a ring
// step, a rank's early chunk against another rank's late one, for one) cost
// a read of the positions and nothing else: no K/V load, no arithmetic.
//
// ---- launch shape -------------------------------------------------------------
// attention.cu's: 4 warps per block, 32-row tiles, lane = key (lane = query
// in the dK/dV kernel). The forward and the dQ kernel run a block per
// (b*NH + h, query tile), grid (B*NH, ceil(Tq/32)); the dK/dV kernel a block
// per (b*NH + h, key tile), grid (B*NH, ceil(Tk/32)). Whether a tile pair is
// skipped is decided from the tiles' largest query and smallest key position,
// which every warp computes alike, so the whole block skips together and
// meets every barrier. Inside a tile pair a position is read where it is
// compared (lanes of a warp read one address: a broadcast from L1) rather
// than held in registers across the loop, which made ptxas spill.
//
// ---- determinism ---------------------------------------------------------------
// As in attention.cu: no atomics. A block owns the out/lse rows of its
// queries (forward), the dq rows of its queries (dQ kernel) or the dk, dv
// rows of its keys (dK/dV kernel), walks the other side's tiles in
// increasing order, and one thread reads, adds and writes each element.
//
// ---- storage -------------------------------------------------------------------
// Storage (float or __nv_bfloat16) is the type of q_qkv, kv_qkv, out, dout
// and the gradients; arithmetic is fp32 with tiles widened on load, and each
// stored result (out after the merge, a gradient after its +=) is rounded
// once. A bf16 += therefore rounds once per ring step.
#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_flash.cuh"
#include "kernels/attention_part.h"
#include "kernels/attention_tiles.cuh"
#include "kernels/common.cuh"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN
namespace {

unsigned Tiles(int T) { return static_cast<unsigned>((T + kTile - 1) / kTile); }

}  // namespace

template <typename Storage>
cudaError_t LaunchAttentionPartForward(Storage* out, float* lse, const Storage* q_qkv,
                                       const Storage* kv_qkv, const int32_t* q_pos,
                                       const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                       bool merge, cudaStream_t stream) {
  if (B <= 0 || Tq <= 0 || NH <= 0 || HS <= 0) return cudaSuccess;
  if (HS > kMaxFlashHeadSize || Tk < 0) return cudaErrorInvalidValue;
  const dim3 grid(B * NH, Tiles(Tq));
  if (grid.y > kMaxGridY) return cudaErrorInvalidValue;
  const size_t smem = FlashForwardSmem(HS);
  constexpr auto kernel = FlashForwardKernel<Storage, PositionMask>;
  const cudaError_t err = AllowDynamicShared<kernel>(smem);
  if (err != cudaSuccess) return err;
  return Launch<kernel>(grid, kThreads, smem, stream, out, lse, q_qkv, kv_qkv,
                        PositionMask{q_pos, k_pos, Tq, Tk}, Tq, Tk, NH, HS,
                        1.0f / sqrtf(static_cast<float>(HS)), merge);
}

template <typename Storage>
cudaError_t LaunchAttentionPartBackward(Storage* dq_qkv, Storage* dkv_qkv, const Storage* dout,
                                        const Storage* q_qkv, const Storage* kv_qkv,
                                        const Storage* out, const float* lse, const int32_t* q_pos,
                                        const int32_t* k_pos, int B, int Tq, int Tk, int NH, int HS,
                                        cudaStream_t stream) {
  if (B <= 0 || Tq <= 0 || Tk <= 0 || NH <= 0 || HS <= 0) return cudaSuccess;
  if (HS > kMaxFlashHeadSize) return cudaErrorInvalidValue;
  const dim3 grid_q(B * NH, Tiles(Tq)), grid_k(B * NH, Tiles(Tk));
  if (grid_q.y > kMaxGridY || grid_k.y > kMaxGridY) return cudaErrorInvalidValue;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const PositionMask mask{q_pos, k_pos, Tq, Tk};
  const size_t smem_kv = FlashBackwardDkDvSmem(HS);
  constexpr auto dkdv = FlashBackwardDkDvKernel<Storage, PositionMask>;
  cudaError_t err = AllowDynamicShared<dkdv>(smem_kv);
  if (err != cudaSuccess) return err;
  err = Launch<dkdv>(grid_k, kThreads, smem_kv, stream, dkv_qkv, dout, q_qkv, kv_qkv, out, lse,
                     mask, Tq, Tk, NH, HS, scale);
  if (err != cudaSuccess) return err;
  const size_t smem_q = FlashBackwardDqSmem(HS);
  constexpr auto dq = FlashBackwardDqKernel<Storage, PositionMask>;
  err = AllowDynamicShared<dq>(smem_q);
  if (err != cudaSuccess) return err;
  return Launch<dq>(grid_q, kThreads, smem_q, stream, dq_qkv, dout, q_qkv, kv_qkv, out, lse, mask,
                    Tq, Tk, NH, HS, scale);
}

// The two storage types (backend.h "Precision").
#define LADDER_ATTENTION_PART_INSTANTIATE(Storage)                                                \
  template cudaError_t LaunchAttentionPartForward<Storage>(                                       \
      Storage*, float*, const Storage*, const Storage*, const int32_t*, const int32_t*, int, int, \
      int, int, int, bool, cudaStream_t);                                                         \
  template cudaError_t LaunchAttentionPartBackward<Storage>(                                      \
      Storage*, Storage*, const Storage*, const Storage*, const Storage*, const Storage*,         \
      const float*, const int32_t*, const int32_t*, int, int, int, int, int, cudaStream_t);
LADDER_ATTENTION_PART_INSTANTIATE(float)
LADDER_ATTENTION_PART_INSTANTIATE(__nv_bfloat16)
#undef LADDER_ATTENTION_PART_INSTANTIATE

LADDER_KERNELS_END
