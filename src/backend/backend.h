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
// Devices and ordering. A backend runs on one device (device()), and every
// tensor an op receives lives there: Allocate hands out that device's
// memory, and the views over it carry the same Device tag. Ops are enqueued
// in call order on the backend's one stream and may run asynchronously: an
// op returning OK means it was accepted (shapes checked, work enqueued), not
// that its result exists yet. Each op sees the results of all ops called
// before it, so code above the interface never waits between ops. Only two
// calls wait for the device: CopyToHost (which returns once the bytes are on
// the host, after everything enqueued before it) and Synchronize. A fault
// inside an asynchronous op (say, an illegal address in a kernel) may
// therefore surface as the error of a later op, copy or Synchronize, not of
// the op that caused it. Host data reaches ops only through CopyFromHost
// into device memory (token ids, targets, positions, KV slots and block
// tables are staged once per step, never per token), and results come back
// only through CopyToHost, as few times per step as possible: each one is
// a wait. The CPU backend runs everything synchronously, so for it every
// error surfaces where it happens and Synchronize has nothing to wait for.
//
// Precision. Every op computes in fp32. Its activations (the tensors of
// token rows it reads and writes: inputs, outputs and their gradients, not
// the statistics) and the weights its forward reads share one *storage
// dtype*, f32 or bf16: bf16 elements are widened exactly when loaded and each
// result is rounded once, to nearest even, when stored. Whatever the
// storage, these stay f32: parameter gradients (dweight, dbias, dgamma,
// dbeta, dwte, dwpe accumulate in fp32, so microbatches and data-parallel
// ranks sum without bf16 rounding; Megatron's "main grads"), statistics
// (LayerNorm mean and rstd, attention lse, the cross-entropy's row_max,
// sum_exp, target_logit, lse and losses), optimizer state and the fp32
// master weights the optimizer updates (RoundToBf16 and AdamWTensor::param16
// make the bf16 copy the ops read). An op given activations or weights of
// mixed dtypes returns InvalidArgument. The cuda and cuda-sim backends take
// both dtypes for the training ops (embedding to cross-entropy); the CPU
// backend stores fp32 only (bf16 activations are InvalidArgument there), with
// one exception for serving: MatmulForward and EmbeddingForward read bf16
// *weights* with fp32 activations (--weights bf16). The serving ops (paged KV
// cache and attention, int8 weights) take fp32 activations on every backend,
// and bf16 ones too on cuda and cuda-sim (serving with bf16 activations:
// W8A16 matmuls, whose output may also be f32 for the logits).
//
// Each op has one reference implementation (the CPU backend); any faster one
// (a CUDA kernel, a vectorized variant) is tested against it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "src/backend/token_sampling.h"
#include "src/core/tensor.h"
#include "src/core/trace.h"

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
  float grad_scale = 1.0f;  // multiplies the gradient first (clipping)
  int step = 1;             // 1-based, for bias correction
  uint64_t round_seed = 0;  // StochasticRounding's seed for AdamWTensor::param16
};

// Stochastic rounding of fp32 to bf16 (src/core/bf16.h
// FloatToBf16Stochastic), for the bf16 copy of weights an optimizer step
// writes: element i of a buffer takes the random word (offset + i) % 4 of the
// Philox block at counter ((offset + i) / 4, kRoundingStream + step) under
// key `seed` (src/core/philox.h). So the copy is a pure function of the
// master value, seed, step and the element's place in its buffer: every
// device rounds the same way, and a resumed run rebuilds it bit for bit.
struct StochasticRounding {
  uint64_t seed = 0;
  uint64_t step = 0;
  int64_t offset = 0;  // the first element's index in its buffer
};

// One tensor of an AdamW update: the parameter, its gradient and its two
// moments (all f32, of one shape), and its decoupled weight decay (0 for
// biases and LayerNorm). param16, if not empty, is a bf16 tensor of the
// same shape that receives the updated parameter rounded stochastically
// (StochasticRounding{AdamWParams::round_seed, step, round_offset}) in the
// same pass: the copy a bf16 model's ops read.
struct AdamWTensor {
  AdamWTensor() = default;
  AdamWTensor(Tensor param, Tensor grad, Tensor m, Tensor v, float weight_decay,
              Tensor param16 = Tensor(), int64_t round_offset = 0)
      : param(param), grad(grad), m(m), v(v), weight_decay(weight_decay), param16(param16),
        round_offset(round_offset) {}
  Tensor param, grad, m, v;
  float weight_decay = 0.0f;
  Tensor param16;
  int64_t round_offset = 0;
};

using DeviceBuffer = std::unique_ptr<void, std::function<void(void*)>>;

// One layer's paged KV cache (see "paged KV cache" below for both formats).
struct PagedKv {
  Tensor k, v;
  Tensor k_scale, v_scale;  // int8 only
  bool int8() const { return !k_scale.empty(); }
};

// Ops recorded once by Backend::Capture, run again as one launch (a CUDA
// graph). Owned by the caller; must not outlive its backend. One host
// thread, as the backend.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Enqueues the recorded ops again, in their order, on the backend's stream,
  // ordered like one op. They read and write the tensors they were given
  // when recorded, at the same addresses, with the same scalar arguments:
  // whatever those tensors hold now is the input. An error of the launch
  // is returned; a fault inside it surfaces later, as any op's.
  virtual absl::Status Replay() = 0;
  // False once the backend has moved memory the recorded ops use (its
  // scratch grew, see Capture): the graph must be recorded again, and
  // Replay refuses (FailedPrecondition).
  virtual bool valid() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // The device every tensor of this backend lives on (see "Devices and
  // ordering" above): code above the interface tags its views with it.
  virtual Device device() const = 0;
  // Waits until every op and copy enqueued so far has finished. Returns the
  // first error of an asynchronous fault not reported yet, if any.
  virtual absl::Status Synchronize() = 0;
  // True iff this device's memory is ordinary host memory that host code
  // (MPI, for one) may read and write directly once the stream is idle: the
  // CPU's, and the CUDA simulator's. False for a GPU.
  virtual bool memory_is_host() const { return device() == Device::kCpu; }
  // Marks on this device's stream for the step trace's device spans
  // (src/core/trace.h), owned by the backend; null where work runs when the
  // host calls it (the CPU), so host time is device time.
  virtual DeviceTimer* timer() { return nullptr; }

  // ---- graphs -----------------------------------------------------------
  // Whether Capture works here: the cuda and cuda-sim backends.
  virtual bool supports_graphs() const { return false; }
  // Calls `body` with this backend recording instead of running: every op
  // `body` calls is checked as usual but not run, and the returned graph
  // runs them all on each Replay, with no host work per op (what removes
  // the launch overhead of a step of many small kernels). Inside `body`
  // only ops, Fill and Copy may be called: anything that waits for the
  // device or crosses to the host (CopyToHost, CopyFromHost, Synchronize,
  // SampleTokens), or allocates (Allocate, an op needing more scratch than
  // the backend holds), fails and so fails the capture; running the same
  // ops once before capturing sizes the scratch. Trace spans inside `body`
  // get no device time. Returns body's error, or the capture's (nothing
  // is enqueued then); Unimplemented where supports_graphs() is false.
  virtual absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(
      const std::function<absl::Status()>& /*body*/) {
    return absl::UnimplementedError(std::string("the ") + std::string(name()) +
                                    " backend cannot record graphs");
  }

  // ---- embedding (vocabulary-parallel) --------------------------------------
  // wte [Vshard,C] holds the rows [vocab_start, vocab_start + Vshard) of the
  // logical (padded) token embedding; the single-process model passes the
  // whole table with vocab_start = 0. Token n sits at position positions[n]
  // of its sequence, given explicitly so one call can embed tokens of many
  // sequences at different positions (a cached decode step):
  //   out[n,:] = (wte given and tokens[n] in the shard ? wte[tokens[n] - vocab_start,:] : 0)
  //            + (wpe empty ? 0 : wpe[positions[n],:])
  // A token outside the shard contributes zero (that is the normal case under
  // tensor parallelism, not an error); a negative token is an error, and so
  // is a position outside [0, maxT) when wpe is given. Tensor parallel use:
  // every rank looks up its own shard, one rank passes wpe, and an
  // all-reduce (sum) of `out` gives the full embedding. wte may be empty
  // (then C comes from out): the position rows alone, for a model whose
  // token table is not fp32 or bf16 (int8 tokens go through DequantizeRows).
  // out [N,C] f32 (any shape of N rows of C, e.g. [B,T,C]); tokens and
  // positions N i32 each (any shape, e.g. [B,T]); wte [Vshard,C] f32 or bf16;
  // wpe [maxT,C] f32 or empty.
  virtual absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                                        Tensor wpe, int64_t vocab_start) = 0;
  // dwte[tokens[n] - vocab_start,:] += dout[n,:] for the tokens in the shard
  // only; dwpe[positions[n],:] += dout[n,:] (skipped if dwpe is empty). Each
  // row's sum is taken in token order n = 0, 1, ..., whatever the device's
  // parallelism. dwte [Vshard,C] f32 (required), dwpe [maxT,C] f32 or empty.
  virtual absl::Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                         Tensor positions, int64_t vocab_start) = 0;

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
  // out = a + b, elementwise: the residual add alone, where a pipeline stage
  // hands its residual stream to the next stage (which normalizes it there).
  // Its backward is the identity on both inputs. out may alias a or b.
  virtual absl::Status ResidualAdd(Tensor out, Tensor a, Tensor b) = 0;

  // ---- matmul with bias ---------------------------------------------------
  // out [N,OC] = inp [N,C] @ weight[OC,C]^T + bias[OC] (bias may be empty).
  virtual absl::Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) = 0;
  // dinp [N,C] = dout @ weight (overwritten; skipped if dinp is empty);
  // dweight [OC,C] += dout^T @ inp; dbias [OC] += column sums of dout (if non-empty).
  virtual absl::Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                      Tensor inp, Tensor weight) = 0;
  // The MLP's up projection and its activation as one op: pre [N,OC] =
  // inp @ weight^T + bias (kept for the backward), out [N,OC] = gelu(pre)
  // (GeluForward's function). Shapes and dtypes as MatmulForward; out and pre
  // must not overlap. On a GPU, cuBLASLt's GELU_AUX_BIAS epilogue writes both
  // from the GEMM's accumulators, saving GeluForward's pass (a read and a
  // write of N x OC values); where the epilogue does not apply (OC not a
  // multiple of 8, no algorithm for the shape) the two ops run in turn.
  virtual absl::Status MatmulGeluForward(Tensor out, Tensor pre, Tensor inp, Tensor weight,
                                         Tensor bias) = 0;
  // The MLP's down projection's backward and the GELU's, as one op: the
  // projection's input is inp = gelu(pre); dpre [N,C] = (dout @ weight) *
  // gelu'(pre) (overwritten), dweight and dbias as MatmulBackward. The same
  // as MatmulBackward(dpre, ...) then GeluBackward(dpre, dpre, pre); dpre
  // must not overlap pre. On a GPU, cuBLASLt's DGELU epilogue applies gelu'
  // to the GEMM's accumulators, saving GeluBackward's pass (two reads and a
  // write of N x C values); where it does not apply (C not a multiple of 8,
  // no algorithm) the two ops run in turn.
  virtual absl::Status MatmulGeluBackward(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                                          Tensor inp, Tensor weight, Tensor pre) = 0;

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

  // ---- attention by positions (context parallelism's ring steps) ------------
  // Context parallelism splits each sequence's tokens over ranks; attention
  // then runs as a ring: each rank's queries meet one key/value block after
  // another, and the partial results merge by log-sum-exp. A rank's tokens
  // are not contiguous (an early and a late chunk of each sequence, for
  // causal load balance), so the mask comes from explicit positions.
  // q_qkv [B,Tq,3C] and kv_qkv [B,Tk,3C] are packed like AttentionForward's
  // qkv (one storage dtype); only the q part of q_qkv and the k and v parts
  // of kv_qkv are read. q_pos [Tq] and k_pos [Tk] (i32, device tensors, the
  // same for every sequence of the batch) are the tokens' positions: query i
  // may attend key j iff k_pos[j] <= q_pos[i]. Scale 1/sqrt(HS) as above.
  // merge == false: out [B,Tq,C] and lse [B,NH,Tq] (f32) are overwritten with
  // this block's attention and log-sum-exp; a query with no allowed key gets
  // out 0 and lse -inf.
  // merge == true: out and lse hold an earlier partial result (over other
  // keys) and become the result over both:
  //   lse = logaddexp(lse1, lse2),  out = out1 exp(lse1 - lse) + out2 exp(lse2 - lse)
  // with (out1, lse1) what they held and (out2, lse2) this block's. A query
  // with no allowed key in this block keeps out and lse bit for bit; one
  // whose lse1 is -inf takes this block's result.
  // out must not overlap q_qkv or kv_qkv (q_qkv and kv_qkv may be the same
  // tensor: a rank's own block).
  virtual absl::Status AttentionPartForward(Tensor out, Tensor lse, Tensor q_qkv, Tensor kv_qkv,
                                            Tensor q_pos, Tensor k_pos, int num_heads,
                                            bool merge) = 0;
  // The backward of one block, given the FINAL out [B,Tq,C] and lse
  // [B,NH,Tq] (merged over all blocks) and dout [B,Tq,C]: with
  // P = exp(scale q k^T - lse) over the allowed pairs of this block and
  // D_i = dout_i . out_i, it accumulates (+=) dq = scale (P * (dout v^T - D)) k
  // into the q part of dq_qkv [B,Tq,3C], and dk, dv into the k and v parts of
  // dkv_qkv [B,Tk,3C]; the other parts are untouched. Summed over the ring's
  // blocks this is AttentionBackward's dqkv. dq_qkv and dkv_qkv may be the
  // same tensor (then q_qkv and kv_qkv are the same too, Tq == Tk);
  // otherwise they must not overlap, and neither may overlap an input.
  virtual absl::Status AttentionPartBackward(Tensor dq_qkv, Tensor dkv_qkv, Tensor dout,
                                             Tensor q_qkv, Tensor kv_qkv, Tensor out, Tensor lse,
                                             Tensor q_pos, Tensor k_pos, int num_heads) = 0;

  // ---- paged KV cache (inference) -------------------------------------------
  // Serving keeps each sequence's keys and values in a cache of fixed-size
  // blocks (src/serve/kv_blocks.h): S = blocks x 16 rows, one row per cached
  // token. A sequence's position p lives in row block_table[p / 16] * 16 + p % 16.
  // Two storage formats (PagedKv):
  //  - fp32: k, v [S, C] f32; k_scale and v_scale empty.
  //  - int8: k, v [S, C] i8 and k_scale, v_scale [S, NH] f32: each token's
  //    slice of one head is quantized symmetrically with its own scale,
  //    x ~= q * scale, scale = max|x| / 127 (0 for an all-zero slice),
  //    q = round(x / scale) (quantize.h QuantizeSymmetric).
  // qkv and out are f32 on every backend, or bf16 on cuda and cuda-sim
  // (serving with bf16 activations): widened exactly when read, the output
  // rounded once, so the cache and the unrounded output are those of the
  // f32 call on the widened values.
  //
  // Writes the k and v parts of qkv [N,3C] (columns [C,2C) and [2C,3C)) into
  // rows slots[n] (i32 [N]) of the caches, quantizing them for int8. The
  // slots must be distinct: tokens are written in parallel, so two naming
  // one row leave either one's values there.
  virtual absl::Status KvCacheWrite(const PagedKv& cache, Tensor qkv, Tensor slots,
                                    int num_heads) = 0;
  // Causal attention of N query tokens over the cache: token n (query
  // qkv[n, 0:C], heads as in AttentionForward) of sequence seq[n] at position
  // pos[n] attends to that sequence's positions 0..pos[n], whose rows it finds
  // through block_tables [num_seqs, max_blocks] (i32; row seq[n]). out [N,C].
  // The keys and values of the query tokens themselves must already be in the
  // cache (KvCacheWrite first). Inference only: there is no backward.
  virtual absl::Status PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                             Tensor block_tables, Tensor seq, Tensor pos,
                                             int num_heads) = 0;

  // ---- int8 weights (inference) ----------------------------------------------
  // A weight matrix [OC, C] quantized symmetrically in groups of G consecutive
  // input channels (Q8_0 style; G = C is one scale per output channel):
  //   W[o, c] ~= q[o, c] * scales[o, c / G],  q in [-127, 127]
  // stored in quantize.h's panel layout (PackInt8Panels): q [OC, C] i8 and
  // scales [OC, C / G] f32 by shape, panels of 16 rows by order; OC a multiple
  // of 16, G a multiple of 32 that divides C. Decoding reads every weight once
  // per token, so int8 moves a quarter of fp32's bytes.
  //
  // out [N,OC] ~= inp [N,C] @ dequant(W)^T + bias[OC] (bias may be empty).
  // The CPU backend quantizes each token's activations too, in blocks of 32
  // (W8A8, llama.cpp's Q8_0 x Q8_0 dot), so each block's dot product is exact
  // integer arithmetic and costs one float multiply-add; see int8_matmul.cc
  // for the exact definition every ISA level computes bit for bit.
  // W8A16 (cuda, cuda-sim; InvalidArgument on the CPU): inp and out bf16,
  // bias f32. Nothing is quantized but the weights: each 16 input channels'
  // exact products q * x are summed in fp32 (on the tensor cores), scaled by
  // their group's scale into an fp32 accumulator, and out is rounded to bf16
  // once (kernels/int8_matmul.h), or left f32 when out is f32 (the logits).
  // A token's row depends on its own activations only, never on the rest of
  // the batch.
  virtual absl::Status MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales,
                                         Tensor bias) = 0;
  // out[n, :] = dequant(W)[rows[n], :]: the embedding lookup of an int8 table.
  // out [N, C] f32, rows [N] i32 in [0, OC).
  virtual absl::Status DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows) = 0;

  // ---- token sampling (inference) -------------------------------------------
  // Draws one token per spec from the rows of logits [N, Vp] f32 (a row's
  // real columns are its first vocab_size, 1 <= vocab_size <= Vp), as
  // token_sampling.h defines it: spec j reads row specs[j].row and its token
  // goes to ids[j], in HOST memory. Returns once the ids are there: a decode
  // step copies back M ids instead of M x V logits, and the device does the
  // softmax, the top-k and top-p cuts and the draw. The CPU backend runs the
  // reference itself; a device's choice equals it except where rounding puts
  // the uniform (or the nucleus' edge) within a few ulp of a boundary
  // between two tokens (greedy: always equal). Logits must not be NaN.
  // InvalidArgument, nothing run: ids.size() != specs.size(), a spec out of
  // range (CheckTokenSampleSpec), a bad vocab_size or logits not an f32
  // matrix on this device.
  virtual absl::Status SampleTokens(Tensor logits, int vocab_size,
                                    absl::Span<const TokenSampleSpec> specs,
                                    absl::Span<int32_t> ids) = 0;

  // ---- softmax cross-entropy (vocabulary-parallel) -------------------------
  // loss[n] = logsumexp(logits[n,:V]) - logits[n,target[n]], computed on a
  // vocabulary SHARD of the logits so the full [N,Vp] logits are never gathered
  // (Megatron's vocab-parallel cross-entropy). A shard holds the columns
  // [vocab_start, vocab_start + Vshard) of the padded vocabulary; of those only
  // global columns < vocab_size (V) are real, the rest is padding that takes
  // no part in the softmax and gets 0 gradient. Three steps, with an all-reduce
  // across the tensor-parallel group between them (single process: the one
  // shard holds everything and the all-reduces are no-ops):
  //   1. CrossEntropyRowMax     -> shard max m_k;        all-reduce MAX -> m
  //   2. CrossEntropyPartials   -> sum_j exp(x_j - m) and the target's logit
  //      (0 on shards that do not hold it);               all-reduce SUM (both)
  //   3. CrossEntropyLoss       -> lse = m + log(sum), loss = lse - target_logit
  // The backward needs only the row's lse: softmax = exp(x - lse), so each
  // shard computes its own columns of dlogits with no communication.
  // Row-wise [N, Vshard] views; targets [N] i32 in [0, V); stats [N] f32.
  //
  // row_max[n] = max of the shard's real columns of logits[n,:]. A shard with
  // no real column (all padding) writes the lowest finite float (-FLT_MAX),
  // not -inf: the MAX all-reduce then ignores it and nothing downstream sees
  // an infinity.
  virtual absl::Status CrossEntropyRowMax(Tensor row_max, Tensor logits, int64_t vocab_start,
                                          int vocab_size) = 0;
  // sum_exp[n] = sum over the shard's real columns j of exp(logits[n,j] - row_max[n])
  // with row_max the GLOBAL max (after the all-reduce); target_logit[n] =
  // logits[n, targets[n] - vocab_start] if the target is in this shard, else 0.
  virtual absl::Status CrossEntropyPartials(Tensor sum_exp, Tensor target_logit, Tensor logits,
                                            Tensor targets, Tensor row_max, int64_t vocab_start,
                                            int vocab_size) = 0;
  // From the reduced statistics: lse[n] = row_max[n] + log(sum_exp[n]) (saved
  // for the backward), losses[n] = lse[n] - target_logit[n] (evaluated as
  // (row_max - target_logit) + log(sum_exp), which keeps a small loss's
  // digits). All [N].
  virtual absl::Status CrossEntropyLoss(Tensor losses, Tensor lse, Tensor row_max, Tensor sum_exp,
                                        Tensor target_logit) = 0;
  // dlogits[n,j] = dloss * (exp(logits[n,j] - lse[n]) - [vocab_start + j == targets[n]])
  // on the shard's real columns, 0 on its padded columns. dlogits may alias
  // logits (done in place).
  virtual absl::Status CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets,
                                            Tensor lse, int64_t vocab_start, int vocab_size,
                                            float dloss) = 0;
  // The four steps over a whole vocabulary (one shard: no all-reduce between
  // them) in one go, llm.c's fused classifier: losses and lse as
  // CrossEntropyLoss writes them, and logits replaced in place by the
  // gradient CrossEntropyBackward writes (dloss, padding 0), with no
  // probability tensor stored. The CPU backend does the four steps'
  // arithmetic row by row (the same bits); the CUDA kernel reads each row
  // once for an online max and sum and once more for the gradient, equal to
  // the steps within rounding.
  virtual absl::Status CrossEntropyFused(Tensor losses, Tensor lse, Tensor logits, Tensor targets,
                                         int vocab_size, float dloss) = 0;

  // ---- optimizer -----------------------------------------------------------
  // out[0] = sum of x[i]^2 over all of x, reduced on the device: out is a
  // 1-element f32 device tensor (typically one slot of a [K] tensor holding
  // one sum per gradient tensor, read back with a single CopyToHost). The
  // sum is accumulated in double in a fixed order (the same bits every time,
  // whatever the parallelism) and rounded to float once at the end.
  virtual absl::Status SumOfSquares(Tensor x, Tensor out) = 0;
  // AdamW on every tensor of `tensors` (on a GPU in one launch): for each,
  // g = grad * grad_scale; m, v moments; decoupled decay:
  // param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param). The
  // tensors must not overlap. Every tensor is checked before any is updated.
  virtual absl::Status AdamWUpdate(const std::vector<AdamWTensor>& tensors,
                                   const AdamWParams& p) = 0;
  // dst (bf16) = src (f32) rounded to nearest even, or stochastically when
  // `sr` is given (StochasticRounding). Same element count (shapes may
  // differ), no overlap; InvalidArgument otherwise. How a bf16 model makes
  // the copy of its master weights after loading them.
  virtual absl::Status RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr) = 0;

  // ---- memory helpers -------------------------------------------------------
  // Zero-initialized device memory, 64-byte aligned, freed with the buffer.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  // Bytes handed out by Allocate and not freed yet (rounded up to 64 each):
  // the memory `ladder plan` predicts, measured.
  virtual int64_t bytes_allocated() const = 0;
  // x[i] = value for every element; x f32 or bf16 (value rounded to nearest).
  virtual absl::Status Fill(Tensor x, float value) = 0;
  // Copies between a tensor on this backend's device and host memory of
  // its bytes() bytes (the only way data crosses between host and device).
  // CopyToHost waits: it returns once dst holds the result of every op
  // enqueued before it. CopyFromHost is ordered like an op (ops called after
  // it see the bytes) and has read `src` by the time it returns, so the host
  // buffer may be reused at once.
  virtual absl::Status CopyToHost(void* dst, Tensor src) = 0;
  virtual absl::Status CopyFromHost(Tensor dst, const void* src) = 0;
  // Prefetching (parameter offload): a host-to-device copy that may overlap
  // the ops. It starts after every op called before it (so it may overwrite
  // memory they read) and ops see it only after WaitCopies(); `src` must
  // stay unchanged until WaitCopies returns. The default is CopyFromHost,
  // ordered like an op; the CUDA backend runs it on a copy stream.
  virtual absl::Status CopyFromHostAsync(Tensor dst, const void* src) {
    return CopyFromHost(dst, src);
  }
  // Orders every op called after it behind every CopyFromHostAsync before.
  virtual absl::Status WaitCopies() { return absl::OkStatus(); }
  // dst = src, bytes copied on the device (no round trip through the host).
  // Both live on this device, have one dtype and the same number of elements
  // (their shapes may differ: a copy is a reshape too) and must not overlap;
  // InvalidArgument otherwise. Ordered like an op: enqueued on the stream,
  // it sees every op called before it and every op called after sees dst.
  virtual absl::Status Copy(Tensor dst, Tensor src) = 0;
};

// Scratch floats AttentionForward/Backward need for a kind and shape.
inline int64_t AttentionScratchFloats(AttentionKind kind, int64_t B, int64_t T, int64_t NH) {
  return kind == AttentionKind::kNaive ? B * NH * T * T : 0;
}

}  // namespace ladder
