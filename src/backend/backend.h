// The op interface: the only thing the model knows about a device.
//
// Every op comes as a forward/backward pair over Tensor views. Shapes use
// N = B*T rows (tokens), C channels, OC output channels, V the real vocabulary
// and Vp the padded vocabulary (a multiple of 128). Weight matrices are stored
// [out, in] (row-major), so a linear layer computes out = inp @ W^T + b.
//
// Conventions every backend follows:
//  - Gradients of *parameters* (dweight, dbias, dgamma, dbeta, dwte, dwpe) are
//    accumulated (+=), so micro-batches can be summed without extra copies.
//  - Gradients of *activations* are overwritten unless the comment says
//    "accumulates" (the residual stream's gradient does, by design).
//  - Ops are deterministic: the same inputs give bitwise-identical outputs
//    (no float atomics, fixed reduction order). The CPU backend's own
//    reductions are even independent of the thread count; OpenBLAS's sgemm
//    is deterministic for a fixed thread count.
//  - Row-wise ops (LayerNorm, matmul, GELU, cross-entropy, optimizer) view a
//    tensor as [numel / last_dim, last_dim]; embedding and attention need the
//    [B,T,...] shapes written below.
//  - An op returns InvalidArgument for inconsistent shapes; it never reads or
//    writes out of bounds.
//
// Each op has one reference implementation (the CPU backend); any faster one
// (a CUDA kernel, a vectorized variant) is tested against it.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/core/tensor.h"

namespace ladder {

enum class AttentionKind {
  kFlash,  // tiled, online softmax, saves log-sum-exp; O(T) memory (default)
  kNaive,  // materializes the T x T scores; O(T^2) memory (for teaching)
};

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; 0 for biases and LayerNorm
  float grad_scale = 1.0f;    // multiplies the gradient first (clipping)
  int step = 1;               // 1-based, for bias correction
};

using DeviceBuffer = std::unique_ptr<void, std::function<void(void*)>>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // ---- embedding -----------------------------------------------------------
  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  // out [B,T,C] f32, tokens [B,T] i32 (each in [0, wte.dim(0))), wte [Vp,C], wpe [maxT,C].
  virtual absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) = 0;
  // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:].
  virtual absl::Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout,
                                         Tensor tokens) = 0;

  // ---- residual + LayerNorm (fused) ---------------------------------------
  // residual_out = residual_in + branch;  y = LayerNorm(residual_out) * gamma + beta.
  // Saves mean [N] and rstd [N] (1/sqrt(var + 1e-5)) for the backward.
  // If branch is empty there is no add: residual_out must be empty and the
  // LayerNorm reads residual_in directly.
  // residual_in/branch/residual_out/y [N,C], gamma/beta [C].
  virtual absl::Status ResidualLayerNormForward(Tensor residual_out, Tensor y, Tensor mean,
                                                Tensor rstd, Tensor residual_in, Tensor branch,
                                                Tensor gamma, Tensor beta) = 0;
  // d_residual (accumulates) += dLayerNorm/dx applied to dy, where x is the
  // LayerNorm's input (residual_out, or residual_in when there was no add).
  // Because residual_out = residual_in + branch, the result is the gradient of
  // both residual_in and branch. dgamma/dbeta accumulate.
  virtual absl::Status ResidualLayerNormBackward(Tensor d_residual, Tensor dgamma, Tensor dbeta,
                                                 Tensor dy, Tensor x, Tensor gamma, Tensor mean,
                                                 Tensor rstd) = 0;

  // ---- matmul with bias ---------------------------------------------------
  // out [N,OC] = inp [N,C] @ weight[OC,C]^T + bias[OC] (bias may be empty).
  virtual absl::Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) = 0;
  // dinp [N,C] = dout @ weight (overwritten; skipped if dinp is empty);
  // dweight [OC,C] += dout^T @ inp; dbias [OC] += column sums of dout (if non-empty).
  virtual absl::Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                      Tensor inp, Tensor weight) = 0;

  // ---- GELU (tanh approximation, as GPT-2) ---------------------------------
  virtual absl::Status GeluForward(Tensor out, Tensor inp) = 0;
  // dinp = dout * gelu'(inp) (overwritten; dinp may alias dout).
  virtual absl::Status GeluBackward(Tensor dinp, Tensor dout, Tensor inp) = 0;

  // ---- causal self-attention ------------------------------------------------
  // qkv [B,T,3C] holds, per token, q for all heads, then k, then v (head h
  // uses channels [h*HS, (h+1)*HS) of each), C = num_heads * HS.
  // out [B,T,C] = softmax(q k^T / sqrt(HS) + causal mask) v, heads concatenated.
  // lse [B,NH,T] receives each row's log-sum-exp of the scaled scores (both
  // kinds save it). scratch: kNaive needs at least B*NH*T*T floats (see
  // AttentionScratchFloats); kFlash needs none and accepts an empty tensor
  // (a backend may keep small per-thread tile buffers of its own).
  // out must not alias qkv; in the backward dqkv aliases none of the inputs.
  virtual absl::Status AttentionForward(Tensor out, Tensor lse, Tensor qkv, int num_heads,
                                        AttentionKind kind, Tensor scratch) = 0;
  // dqkv [B,T,3C] (overwritten) from dout [B,T,C], recomputing probabilities
  // from qkv and lse (flash-style: nothing T x T is kept between the passes).
  virtual absl::Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                         Tensor lse, int num_heads, AttentionKind kind,
                                         Tensor scratch) = 0;

  // ---- fused softmax + cross-entropy ----------------------------------------
  // losses[n] = logsumexp(logits[n,:V]) - logits[n,targets[n]]; columns >= V
  // (vocabulary padding) are ignored. logits [N,Vp], targets [N] i32 in [0,V).
  virtual absl::Status CrossEntropyForward(Tensor losses, Tensor logits, Tensor targets,
                                           int vocab_size) = 0;
  // dlogits[n,:] = dloss * (softmax(logits[n,:V]) - onehot(targets[n])), and
  // 0 in the padded columns. dlogits may alias logits (done in place).
  virtual absl::Status CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets,
                                            int vocab_size, float dloss) = 0;

  // ---- optimizer -----------------------------------------------------------
  // Sum of squares of x in double precision, in a fixed reduction order.
  virtual absl::Status SumOfSquares(Tensor x, double* result) = 0;
  // AdamW on one tensor: g = grad * grad_scale; m,v moments; decoupled decay:
  // param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param).
  virtual absl::Status AdamWUpdate(Tensor param, Tensor grad, Tensor m, Tensor v,
                                   const AdamWParams& p) = 0;

  // ---- memory helpers -------------------------------------------------------
  // Zero-initialized device memory, 64-byte aligned, freed with the buffer.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  virtual absl::Status Fill(Tensor x, float value) = 0;
  // Copies between a tensor on this backend's device and host memory of
  // x.bytes() bytes (the only way code above the interface reads results).
  virtual absl::Status CopyToHost(void* dst, Tensor src) = 0;
  virtual absl::Status CopyFromHost(Tensor dst, const void* src) = 0;
};

// Scratch floats AttentionForward/Backward need for a kind and shape.
inline int64_t AttentionScratchFloats(AttentionKind kind, int64_t B, int64_t T, int64_t NH) {
  return kind == AttentionKind::kNaive ? B * NH * T * T : 0;
}

}  // namespace ladder
