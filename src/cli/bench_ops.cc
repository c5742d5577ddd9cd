// ladder bench ops: every Backend op on the shapes of one GPT-2 124M layer,
// each timed against its floor, through the same backend (cpu, cuda-sim or
// cuda) and measured in the same run:
//   - copy bandwidth: the best Backend::Copy of one large buffer, read and
//     write bytes both counted;
//   - matmul rate: the best MatmulForward of two large GEMMs (a square-ish
//     one and the layer's widest), 2 M N K FLOPs;
//   - on a device backend also the bf16 matmul rate (tools/ceiling.h's
//     MeasureBackendGemmCeiling in bf16: the tensor cores' rate), the
//     compute floor of the rows marked "bf16": the attention kernels with
//     bf16 storage, which run on the tensor cores at head size 64
//     (kernels/flash_attention_tc.cu), and the W8A16 int8 matmul
//     (kernels/int8_matmul.cu), 2 bytes an activation.
// An op that must move `bytes` and compute `flops` cannot take less than
//   floor = max(bytes / copy bandwidth, flops / matmul rate)
// and its row says which term is larger (memory or compute) and floor /
// measured ("of floor": 1.0 is at the floor). The bytes and FLOPs are the
// op's analytic minimum, written next to each op below: every input read
// once, every output written once (accumulated outputs read and written),
// fp32 (4 bytes) unless stated. The last line is the geometric mean of
// "of floor" over all ops. The ratios are the point; the absolute figures
// describe only the machine they ran on.
//
// Each timing is one call enqueued and then Synchronize; the figure is the
// best of --reps after one untimed call. Before each timed call an untimed
// Copy of the floor's buffer (at least 64 MiB) evicts the op's tensors from
// the caches, so an op whose tensors would fit a cache (int8 weights at
// batch 1 fit a GPU's L2) is timed as a training or decode step sees it,
// from memory. Inputs are random (the speed does not depend on them), ids
// in range.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/core/bf16.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/philox.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/tools/ceiling.h"

namespace ladder {
namespace {

// GPT-2 124M: the full-size defaults that --tokens 8192 (8 x 1024) runs at.
constexpr int64_t kC = 768, kNH = 12, kMaxT = 1024, kFullTokens = 8192;
constexpr int64_t kGpt2Vocab = 50257;
constexpr int64_t kGpt2Params = 124475904;  // with the vocabulary padded to 50304
constexpr int64_t kCopyBytes = int64_t{256} << 20;
constexpr int64_t kF = 4;  // bytes of an f32 or i32

struct Flags {
  std::string device = "auto", out;
  int64_t tokens = kFullTokens, reps = 10, vocab = 0, params = 0;
};

// Owns the device buffers of the run and hands out views of them.
class Buffers {
 public:
  explicit Buffers(Backend& be) : be_(be) {}
  absl::StatusOr<Tensor> Make(DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dtype, dims, be_.device());
    ASSIGN_OR_RETURN(DeviceBuffer buf, be_.Allocate(t.bytes()));
    t.data = buf.get();
    owned_.push_back(std::move(buf));
    return t;
  }

 private:
  Backend& be_;
  std::vector<DeviceBuffer> owned_;
};

// Fills t with a tile of up to 4M host values from gen(), repeated.
template <typename T, typename Gen>
absl::Status FillTiled(Backend& be, Tensor t, Gen gen) {
  const int64_t n = t.numel(), tile = std::min<int64_t>(n, int64_t{1} << 22);
  std::vector<T> host(tile);
  for (T& v : host) v = gen();
  for (int64_t at = 0; at < n; at += tile) {
    RETURN_IF_ERROR(be.CopyFromHost(t.Slice(at, {std::min(tile, n - at)}), host.data()));
  }
  return absl::OkStatus();
}

// One timed op: what it must move and compute, and the call.
struct Op {
  std::string name, shape;
  double bytes, flops;
  std::function<absl::Status()> call;
  bool bf16 = false;  // the compute floor is the bf16 matmul rate
};

// Best seconds of `reps` calls, each enqueued and waited for, after one
// untimed call; each timed call after flush() (if given), which is not timed.
absl::StatusOr<double> TimeOp(Backend& be, int64_t reps, const std::function<absl::Status()>& call,
                              const std::function<absl::Status()>& flush) {
  RETURN_IF_ERROR(call());
  RETURN_IF_ERROR(be.Synchronize());
  double best = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    if (flush) {
      RETURN_IF_ERROR(flush());
      RETURN_IF_ERROR(be.Synchronize());
    }
    Timer t;
    RETURN_IF_ERROR(call());
    RETURN_IF_ERROR(be.Synchronize());
    best = std::min(best, t.Seconds());
  }
  return best;
}

std::string Dims(std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t d : dims) absl::StrAppend(&s, s.empty() ? "" : "x", d);
  return s;
}

absl::Status Run(const Flags& f) {
  if (f.tokens < 1 || f.tokens > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens must be in [1, 1048576], got ", f.tokens));
  }
  const int64_t T = std::min(kMaxT, f.tokens), N = f.tokens, B = N / T;
  if (N % T != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens must be a multiple of T = ", T, " (B x T rows), got ", N));
  }
  if (f.reps < 1)
    return absl::InvalidArgumentError(absl::StrCat("--reps must be >= 1, got ", f.reps));
  if (f.vocab < 0 || f.params < 0) {
    return absl::InvalidArgumentError("--vocab and --params must be positive (or 0: scaled)");
  }
  if (f.vocab > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab must be at most 16777216, got ", f.vocab));
  }
  // The two full-model sizes scale with --tokens below 8192 unless given.
  const int64_t V =
      f.vocab > 0 ? f.vocab
                  : std::max<int64_t>(128, kGpt2Vocab * std::min(N, kFullTokens) / kFullTokens);
  const int64_t Vp = (V + 127) / 128 * 128;
  const int64_t P =
      f.params > 0 ? f.params
                   : std::max<int64_t>(1024, kGpt2Params * std::min(N, kFullTokens) / kFullTokens);
  const int64_t C = kC, NH = kNH, HS = C / NH;
  const int64_t copy_bytes =
      std::max<int64_t>(int64_t{64} << 20, kCopyBytes * std::min(N, kFullTokens) / kFullTokens);
  // The square-ish floor GEMM: [N, K] x [K, K]^T, K = N/2 in [C, 4096].
  const int64_t K = std::clamp<int64_t>(N / 2 / 128 * 128, C, 4096);

  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  Backend& be = *backend;
  Buffers buf(be);
  PhiloxStream rng(1234, kSyntheticDataStream);
  auto uniform = [&] { return rng.NextUniform() - 0.5f; };
  auto make_random = [&](std::initializer_list<int64_t> dims) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor t, buf.Make(DType::kF32, dims));
    RETURN_IF_ERROR(FillTiled<float>(be, t, uniform));
    return t;
  };
  auto make_random_bf16 = [&](std::initializer_list<int64_t> dims) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor t, buf.Make(DType::kBF16, dims));
    RETURN_IF_ERROR(FillTiled<bf16>(be, t, [&] { return FloatToBf16(uniform()); }));
    return t;
  };
  auto make_ids = [&](std::initializer_list<int64_t> dims,
                      const std::function<int32_t(int64_t)>& id) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor t, buf.Make(DType::kI32, dims));
    std::vector<int32_t> host(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) host[i] = id(i);
    RETURN_IF_ERROR(be.CopyFromHost(t, host.data()));
    return t;
  };

  // ---- the floors ---------------------------------------------------------
  ASSIGN_OR_RETURN(Tensor copy_src, make_random({copy_bytes / kF}));
  ASSIGN_OR_RETURN(Tensor copy_dst, buf.Make(DType::kF32, {copy_bytes / kF}));
  // Before every timed call: this copy, untimed, evicts the op's tensors
  // from the caches (at least 64 MiB each way; a GPU's L2 is smaller).
  auto flush = [&] { return be.Copy(copy_dst, copy_src); };
  ASSIGN_OR_RETURN(const double copy_s, TimeOp(be, f.reps, flush, nullptr));
  const double bandwidth = 2.0 * copy_bytes / copy_s;  // read + write
  // The matmul rate: the better of a square-ish GEMM [N,K] x [K,K]^T and
  // the layer's widest, [N,C] x [4C,C]^T, no bias.
  const int64_t W = std::max(K, 4 * C);
  ASSIGN_OR_RETURN(Tensor gemm_a, make_random({N, K}));
  ASSIGN_OR_RETURN(Tensor gemm_w, make_random({W, K}));
  ASSIGN_OR_RETURN(Tensor gemm_out, buf.Make(DType::kF32, {N, W}));
  auto square = [&] {
    return be.MatmulForward(gemm_out.Slice(0, {N, K}), gemm_a, gemm_w.Slice(0, {K, K}), Tensor());
  };
  auto wide = [&] {
    return be.MatmulForward(gemm_out.Slice(0, {N, 4 * C}), gemm_a.Slice(0, {N, C}),
                            gemm_w.Slice(0, {4 * C, C}), Tensor());
  };
  ASSIGN_OR_RETURN(const double square_s, TimeOp(be, f.reps, square, flush));
  ASSIGN_OR_RETURN(const double wide_s, TimeOp(be, f.reps, wide, flush));
  const double square_rate = 2.0 * N * K * K / square_s, wide_rate = 2.0 * N * 4 * C * C / wide_s;
  const double matmul_rate = std::max(square_rate, wide_rate);
  const std::string matmul_shape = square_rate >= wide_rate
                                       ? absl::StrCat(Dims({N, K}), " by ", Dims({K, K}))
                                       : absl::StrCat(Dims({N, C}), " by ", Dims({4 * C, C}));
  // The bf16 rate, on device backends (the CPU stores fp32 only).
  const bool device = be.device() != Device::kCpu;
  GemmCeiling bf16_ceiling;
  if (device) {
    ASSIGN_OR_RETURN(bf16_ceiling,
                     MeasureBackendGemmCeiling(be, 2048, static_cast<int>(f.reps), DType::kBF16));
  }
  const double bf16_rate = bf16_ceiling.gflops * 1e9;

  // ---- the layer's tensors --------------------------------------------------
  ASSIGN_OR_RETURN(Tensor tokens, make_ids({B, T}, [&](int64_t) {
                     return static_cast<int32_t>(rng.NextU32() % V);
                   }));
  ASSIGN_OR_RETURN(Tensor positions,
                   make_ids({B, T}, [&](int64_t i) { return static_cast<int32_t>(i % T); }));
  ASSIGN_OR_RETURN(Tensor wte, make_random({Vp, C}));
  ASSIGN_OR_RETURN(Tensor wpe, make_random({T, C}));
  ASSIGN_OR_RETURN(Tensor dwte, make_random({Vp, C}));
  ASSIGN_OR_RETURN(Tensor dwpe, make_random({T, C}));
  ASSIGN_OR_RETURN(Tensor x, make_random({B, T, C}));  // residual stream, LayerNorm input
  ASSIGN_OR_RETURN(Tensor branch, make_random({B, T, C}));
  ASSIGN_OR_RETURN(Tensor dx, make_random({B, T, C}));  // gradients [N, C]
  ASSIGN_OR_RETURN(Tensor y, buf.Make(DType::kF32, {B, T, C}));
  ASSIGN_OR_RETURN(Tensor residual_out, buf.Make(DType::kF32, {B, T, C}));
  ASSIGN_OR_RETURN(Tensor mean, buf.Make(DType::kF32, {B, T}));
  ASSIGN_OR_RETURN(Tensor rstd, buf.Make(DType::kF32, {B, T}));
  ASSIGN_OR_RETURN(Tensor gamma, make_random({C}));
  ASSIGN_OR_RETURN(Tensor beta, make_random({C}));
  ASSIGN_OR_RETURN(Tensor dgamma, make_random({C}));
  ASSIGN_OR_RETURN(Tensor dbeta, make_random({C}));
  // Matmuls: qkv (C -> 3C) and fc (C -> 4C); activations [N, 4C] serve both.
  ASSIGN_OR_RETURN(Tensor w_fc, make_random({4 * C, C}));
  ASSIGN_OR_RETURN(Tensor b_fc, make_random({4 * C}));
  ASSIGN_OR_RETURN(Tensor dw_fc, make_random({4 * C, C}));
  ASSIGN_OR_RETURN(Tensor db_fc, make_random({4 * C}));
  ASSIGN_OR_RETURN(Tensor act, make_random({N, 4 * C}));
  ASSIGN_OR_RETURN(Tensor act2, make_random({N, 4 * C}));
  ASSIGN_OR_RETURN(Tensor act_out, buf.Make(DType::kF32, {N, 4 * C}));
  // Attention over qkv [B, T, 3C] (a slice of act's bytes would do, but the
  // projection's output is its own tensor in the model too).
  ASSIGN_OR_RETURN(Tensor qkv, make_random({B, T, 3 * C}));
  ASSIGN_OR_RETURN(Tensor dqkv, buf.Make(DType::kF32, {B, T, 3 * C}));
  ASSIGN_OR_RETURN(Tensor atty, buf.Make(DType::kF32, {B, T, C}));
  ASSIGN_OR_RETURN(Tensor lse, buf.Make(DType::kF32, {B, NH, T}));
  // Cross-entropy over logits [N, Vp], V of them real.
  ASSIGN_OR_RETURN(Tensor logits, make_random({N, Vp}));
  ASSIGN_OR_RETURN(Tensor targets,
                   make_ids({N}, [&](int64_t) { return static_cast<int32_t>(rng.NextU32() % V); }));
  ASSIGN_OR_RETURN(Tensor ce_stats, buf.Make(DType::kF32, {5, N}));
  const Tensor row_max = ce_stats.Slice(0, {N}), sum_exp = ce_stats.Slice(N, {N}),
               target_logit = ce_stats.Slice(2 * N, {N}), losses = ce_stats.Slice(3 * N, {N}),
               ce_lse = ce_stats.Slice(4 * N, {N});
  // The optimizer over P parameters (one tensor), and the gradient norm's sum.
  ASSIGN_OR_RETURN(Tensor param, make_random({P}));
  ASSIGN_OR_RETURN(Tensor grad, make_random({P}));
  ASSIGN_OR_RETURN(Tensor m1, buf.Make(DType::kF32, {P}));
  ASSIGN_OR_RETURN(Tensor m2, buf.Make(DType::kF32, {P}));
  ASSIGN_OR_RETURN(Tensor sumsq, buf.Make(DType::kF32, {1}));
  // Serving: the fc weights in int8 (groups of 32) at batch 1, and the
  // paged fp32 KV cache of B sequences of T tokens in blocks of 16.
  constexpr int64_t kGroup = 32, kBlock = 16;
  ASSIGN_OR_RETURN(Tensor q8, buf.Make(DType::kI8, {4 * C, C}));
  RETURN_IF_ERROR(FillTiled<int8_t>(
      be, q8, [&] { return static_cast<int8_t>(static_cast<int>(rng.NextU32() % 255) - 127); }));
  ASSIGN_OR_RETURN(Tensor q8_scales, make_random({4 * C, C / kGroup}));
  const int64_t max_blocks = (T + kBlock - 1) / kBlock, S = B * max_blocks * kBlock;
  ASSIGN_OR_RETURN(Tensor k_cache, buf.Make(DType::kF32, {S, C}));
  ASSIGN_OR_RETURN(Tensor v_cache, buf.Make(DType::kF32, {S, C}));
  const PagedKv cache{k_cache, v_cache, Tensor(), Tensor()};
  ASSIGN_OR_RETURN(Tensor slots, make_ids({N}, [&](int64_t n) {
                     return static_cast<int32_t>(n / T * max_blocks * kBlock + n % T);
                   }));
  ASSIGN_OR_RETURN(Tensor block_tables,
                   make_ids({B, max_blocks}, [&](int64_t i) { return static_cast<int32_t>(i); }));
  ASSIGN_OR_RETURN(Tensor seq, make_ids({B}, [&](int64_t b) { return static_cast<int32_t>(b); }));
  ASSIGN_OR_RETURN(Tensor pos, make_ids({B}, [&](int64_t) { return static_cast<int32_t>(T - 1); }));
  // The decode step's queries: the last token of each sequence.
  ASSIGN_OR_RETURN(Tensor qkv_decode, make_random({B, 3 * C}));
  ASSIGN_OR_RETURN(Tensor out_decode, buf.Make(DType::kF32, {B, C}));
  RETURN_IF_ERROR(be.KvCacheWrite(cache, qkv.Slice(0, {N, 3 * C}), slots, static_cast<int>(NH)));

  // ---- the ops: bytes and FLOPs each must move and compute ------------------
  const double n = N, c = C, t = T, b = B, nh = NH, hs = HS, v = V, vp = Vp, p = P;
  const std::string nc = Dims({B, T, C});
  std::vector<Op> ops;
  // Gather a token row and a position row, write the sum; ids 2 x i32.
  ops.push_back({"EmbeddingForward", nc, kF * (3 * n * c) + 8 * n, n * c,
                 [&] { return be.EmbeddingForward(x, tokens, positions, wte, wpe, 0); }});
  // Read dout; add into N token rows and T position rows (read + write).
  ops.push_back({"EmbeddingBackward", nc, kF * (3 * n * c + 2 * t * c) + 8 * n, 2 * n * c,
                 [&] { return be.EmbeddingBackward(dwte, dwpe, dx, tokens, positions, 0); }});
  // Read residual and branch, write the sum and y; mean, rstd; gamma, beta.
  // ~8 FLOPs an element: add, mean, variance (2), normalize (2), scale, shift.
  ops.push_back({"ResidualLayerNormForward", nc, kF * (4 * n * c + 2 * n + 2 * c), 8 * n * c, [&] {
                   return be.ResidualLayerNormForward(residual_out, y, mean, rstd, x, branch, gamma,
                                                      beta);
                 }});
  // Read dy and x, accumulate d_residual (read + write); mean, rstd, gamma;
  // accumulate dgamma, dbeta. ~10 FLOPs an element.
  ops.push_back(
      {"ResidualLayerNormBackward", nc, kF * (4 * n * c + 2 * n + 5 * c), 10 * n * c,
       [&] { return be.ResidualLayerNormBackward(dx, dgamma, dbeta, y, x, gamma, mean, rstd); }});
  // Read a and b, write out.
  ops.push_back({"ResidualAdd", nc, kF * 3 * n * c, n * c,
                 [&] { return be.ResidualAdd(residual_out, x, branch); }});
  // out [N,OC] = inp [N,C] W^T + b: read inp, W, b, write out; 2 N OC C.
  // Backward: read dout, inp, W; write dinp; accumulate dW, db; 4 N OC C
  // (dinp and dW) + N OC (db).
  for (const int64_t mult : {3, 4}) {
    const double oc = static_cast<double>(mult * C);
    const std::string which = mult == 3 ? " qkv" : " fc";
    const Tensor w = w_fc.Slice(0, {mult * C, C}), bias = b_fc.Slice(0, {mult * C});
    const Tensor dw = dw_fc.Slice(0, {mult * C, C}), db = db_fc.Slice(0, {mult * C});
    const Tensor out = act_out.Slice(0, {N, mult * C}), dout = act.Slice(0, {N, mult * C});
    const Tensor inp = x.Slice(0, {N, C}), dinp = dx.Slice(0, {N, C});
    const std::string shape = Dims({N, C}) + "->" + Dims({N, mult * C});
    ops.push_back({"MatmulForward" + which, shape, kF * (n * c + oc * c + oc + n * oc),
                   2 * n * oc * c,
                   [&be, out, inp, w, bias] { return be.MatmulForward(out, inp, w, bias); }});
    ops.push_back({"MatmulBackward" + which, shape,
                   kF * (n * oc + n * c + oc * c + 2 * oc * c + n * c + 2 * oc),
                   4 * n * oc * c + n * oc, [&be, dinp, dw, db, dout, inp, w] {
                     return be.MatmulBackward(dinp, dw, db, dout, inp, w);
                   }});
  }
  // On [N, 4C]: read inp, write out; ~8 FLOPs an element (tanh as one).
  // Backward: read dout and inp, write dinp; ~16 FLOPs an element.
  const std::string n4c = Dims({N, 4 * C});
  ops.push_back({"GeluForward", n4c, kF * 2 * n * 4 * c, 8 * n * 4 * c,
                 [&] { return be.GeluForward(act_out, act); }});
  ops.push_back({"GeluBackward", n4c, kF * 3 * n * 4 * c, 16 * n * 4 * c,
                 [&] { return be.GeluBackward(act_out, act2, act); }});
  // Causal flash attention: read qkv, write out and lse. FLOPs: q k^T and
  // p v, 2 T^2 HS each per head, halved by the mask: 4 B NH T^2 HS / 2
  // (softmax's exps not counted). Backward: read qkv, out, dout, lse, write
  // dqkv; five such products (s recomputed, dp, dv, dq, dk): 2.5x forward.
  const double attn_flops = 4 * b * nh * t * t * hs / 2;
  const std::string attn_shape = absl::StrCat(Dims({B, T, 3 * C}), " NH ", NH);
  ops.push_back(
      {"AttentionForward", attn_shape, kF * (3 * n * c + n * c + b * nh * t), attn_flops, [&] {
         return be.AttentionForward(atty, lse, qkv, static_cast<int>(NH), AttentionKind::kFlash,
                                    Tensor());
       }});
  ops.push_back({"AttentionBackward", attn_shape,
                 kF * (3 * n * c + 2 * n * c + b * nh * t + 3 * n * c), 2.5 * attn_flops, [&] {
                   return be.AttentionBackward(dqkv, atty, qkv, atty, lse, static_cast<int>(NH),
                                               AttentionKind::kFlash, Tensor());
                 }});
  if (device) {
    // The same attention with bf16 storage (lse stays f32): half the bytes,
    // the tensor cores' rate as the compute floor.
    ASSIGN_OR_RETURN(Tensor qkv16, make_random_bf16({B, T, 3 * C}));
    ASSIGN_OR_RETURN(Tensor dqkv16, buf.Make(DType::kBF16, {B, T, 3 * C}));
    ASSIGN_OR_RETURN(Tensor atty16, make_random_bf16({B, T, C}));
    constexpr double k2 = 2;  // bytes of a bf16
    ops.push_back({"AttentionForward bf16", attn_shape, k2 * (3 * n * c + n * c) + kF * b * nh * t,
                   attn_flops,
                   [&be, atty16, lse, qkv16, NH] {
                     return be.AttentionForward(atty16, lse, qkv16, static_cast<int>(NH),
                                                AttentionKind::kFlash, Tensor());
                   },
                   /*bf16=*/true});
    ops.push_back({"AttentionBackward bf16", attn_shape,
                   k2 * (3 * n * c + 2 * n * c + 3 * n * c) + kF * b * nh * t, 2.5 * attn_flops,
                   [&be, dqkv16, atty16, qkv16, lse, NH] {
                     return be.AttentionBackward(dqkv16, atty16, qkv16, atty16, lse,
                                                 static_cast<int>(NH), AttentionKind::kFlash,
                                                 Tensor());
                   },
                   /*bf16=*/true});
  }
  // Cross-entropy forward, its three steps as one row: the real columns of
  // the logits read twice (the max, then the exps: the all-reduce of the
  // max sits between them under tensor parallelism); targets; five [N]
  // statistics written, three read. ~4 FLOPs a logit (max, subtract, exp,
  // add). Backward (in place, as in training): read and write the logits;
  // targets and lse; ~3 FLOPs a logit.
  const std::string ce_shape = absl::StrCat(Dims({N, Vp}), " V ", V);
  ops.push_back({"CrossEntropyForward", ce_shape, kF * (2 * n * v + n + 8 * n), 4 * n * v, [&] {
                   const int vs = static_cast<int>(V);
                   RETURN_IF_ERROR(be.CrossEntropyRowMax(row_max, logits, 0, vs));
                   RETURN_IF_ERROR(be.CrossEntropyPartials(sum_exp, target_logit, logits, targets,
                                                           row_max, 0, vs));
                   return be.CrossEntropyLoss(losses, ce_lse, row_max, sum_exp, target_logit);
                 }});
  ops.push_back({"CrossEntropyBackward", ce_shape, kF * (2 * n * vp + 2 * n), 3 * n * v, [&] {
                   return be.CrossEntropyBackward(logits, logits, targets, ce_lse, 0,
                                                  static_cast<int>(V), 1.0f / N);
                 }});
  // The fused classifier (one shard: the whole vocabulary), forward and
  // backward: the real columns read once, every column of dlogits written
  // in place; targets; losses and lse written. ~7 FLOPs a logit.
  ops.push_back({"CrossEntropyFused", ce_shape, kF * (n * v + n * vp + 3 * n), 7 * n * v, [&] {
                   return be.CrossEntropyFused(losses, ce_lse, logits, targets, static_cast<int>(V),
                                               1.0f / N);
                 }});
  // Read every gradient once; 2 FLOPs each.
  const std::string p_shape = Dims({P});
  ops.push_back(
      {"SumOfSquares", p_shape, kF * p, 2 * p, [&] { return be.SumOfSquares(grad, sumsq); }});
  // Read param, grad, m, v; write param, m, v; ~12 FLOPs a parameter.
  ops.push_back({"AdamWUpdate", p_shape, kF * 7 * p, 12 * p, [&] {
                   AdamWParams ap;
                   ap.lr = 1e-4f;
                   return be.AdamWUpdate({{param, grad, m1, m2, 0.1f}}, ap);
                 }});
  // Decoding, batch 1: read the int8 fc weights (1 byte each) and their
  // scales, the token's activations and the bias, write out; 2 OC C FLOPs.
  {
    const double oc = 4 * c;
    const Tensor inp = x.Slice(0, {1, C}), out = act_out.Slice(0, {1, 4 * C});
    ops.push_back({"MatmulInt8Forward", absl::StrCat(Dims({1, C}), "->", Dims({1, 4 * C}), " G 32"),
                   oc * c + kF * (oc * c / kGroup + c + 2 * oc), 2 * oc * c,
                   [&be, out, inp, q8, q8_scales, b_fc] {
                     return be.MatmulInt8Forward(out, inp, q8, q8_scales, b_fc);
                   }});
  }
  if (device) {
    // W8A16, the same fc weights with bf16 activations (the tensor cores):
    // at batch 1 (decode: the weights are nearly all the bytes) and over the
    // N tokens (prefill: compute-bound, against the bf16 matmul rate). Bytes:
    // the int8 weights and f32 scales, bf16 activations in and out, the f32
    // bias; 2 N OC C FLOPs.
    const double oc = 4 * c, k2 = 2;
    ASSIGN_OR_RETURN(Tensor x16, make_random_bf16({N, C}));
    ASSIGN_OR_RETURN(Tensor out16, buf.Make(DType::kBF16, {N, 4 * C}));
    for (const int64_t rows : {int64_t{1}, N}) {
      const double r = static_cast<double>(rows);
      const Tensor inp = x16.Slice(0, {rows, C}), out = out16.Slice(0, {rows, 4 * C});
      ops.push_back({"MatmulInt8Forward W8A16",
                     absl::StrCat(Dims({rows, C}), "->", Dims({rows, 4 * C}), " G 32"),
                     oc * c + kF * (oc * c / kGroup + oc) + k2 * r * (c + oc), 2 * r * oc * c,
                     [&be, out, inp, q8, q8_scales, b_fc] {
                       return be.MatmulInt8Forward(out, inp, q8, q8_scales, b_fc);
                     },
                     /*bf16=*/true});
    }
  }
  // A prefill's cache write: read the k and v columns of N tokens, write
  // them into their slots; slots i32. No FLOPs.
  ops.push_back(
      {"KvCacheWrite", absl::StrCat(Dims({N, 3 * C}), " into ", Dims({S, C})),
       kF * (2 * n * c + 2 * n * c + n), 0, [&] {
         return be.KvCacheWrite(cache, qkv.Slice(0, {N, 3 * C}), slots, static_cast<int>(NH));
       }});
  // A decode step of B sequences at position T-1: read each one's T cached
  // k and v rows, its query, write out; block tables, seq, pos. FLOPs: q k
  // and p v over T positions, 4 T C per query.
  ops.push_back(
      {"PagedAttentionForward", absl::StrCat(Dims({B, 3 * C}), " over ", B, "x", T, " cached"),
       kF * (2 * b * t * c + b * 3 * c + b * c + b * max_blocks + 2 * b), 4 * b * t * c, [&] {
         return be.PagedAttentionForward(out_decode, qkv_decode, cache, block_tables, seq, pos,
                                         static_cast<int>(NH));
       }});

  // ---- run, print -------------------------------------------------------------
  std::printf(
      "bench ops: device %s; a GPT-2 124M layer: %lld tokens (B %lld x T %lld), C %lld, NH %lld, "
      "V %lld (padded %lld), AdamW over %.2fM parameters; best of %lld\n",
      std::string(be.name()).c_str(), static_cast<long long>(N), static_cast<long long>(B),
      static_cast<long long>(T), static_cast<long long>(C), static_cast<long long>(NH),
      static_cast<long long>(V), static_cast<long long>(Vp), P / 1e6,
      static_cast<long long>(f.reps));
  std::printf("copy bandwidth: %.2f GB/s (Copy of %.1f MiB, read + write counted)\n",
              bandwidth / 1e9, copy_bytes / 1048576.0);
  std::printf("matmul rate:    %.3f TFLOP/s (MatmulForward %s, the better of two shapes)\n",
              matmul_rate / 1e12, matmul_shape.c_str());
  if (device) {
    std::printf("bf16 matmul rate: %.3f TFLOP/s (%s; the compute floor of the bf16 rows)\n",
                bf16_rate / 1e12, bf16_ceiling.source.c_str());
  }
  std::printf("%-26s %-30s %10s %9s %9s %-7s %10s %8s\n", "op", "shape", "ms", "GB/s", "TFLOP/s",
              "bound", "floor ms", "of floor");
  std::string tsv = "op\tshape\tms\tgb_per_s\ttflop_per_s\tbound\tfloor_ms\tof_floor\n";
  double log_sum = 0;
  std::string worst;
  double worst_ratio = 1e30;
  for (const Op& op : ops) {
    ASSIGN_OR_RETURN(const double s, TimeOp(be, f.reps, op.call, flush));
    const double mem_floor = op.bytes / bandwidth,
                 compute_floor = op.flops / (op.bf16 ? bf16_rate : matmul_rate);
    const double floor = std::max(mem_floor, compute_floor);
    const double ratio = floor / s;
    const char* bound = mem_floor >= compute_floor ? "memory" : "compute";
    const std::string row =
        absl::StrFormat("%.6g\t%.4g\t%.4g\t%s\t%.6g\t%.4g", 1e3 * s, op.bytes / s / 1e9,
                        op.flops / s / 1e12, bound, 1e3 * floor, ratio);
    std::printf("%-26s %-30s %10.4f %9.2f %9.3f %-7s %10.4f %8.3f\n", op.name.c_str(),
                op.shape.c_str(), 1e3 * s, op.bytes / s / 1e9, op.flops / s / 1e12, bound,
                1e3 * floor, ratio);
    absl::StrAppend(&tsv, op.name, "\t", op.shape, "\t", row, "\n");
    log_sum += std::log(ratio);
    if (ratio < worst_ratio) {
      worst_ratio = ratio;
      worst = op.name;
    }
  }
  std::printf("geometric mean of floor/measured: %.3f over %zu ops (worst: %s at %.3f)\n",
              std::exp(log_sum / static_cast<double>(ops.size())), ops.size(), worst.c_str(),
              worst_ratio);
  if (!f.out.empty()) RETURN_IF_ERROR(WriteFileAtomically(f.out, tsv));
  return absl::OkStatus();
}

}  // namespace

int BenchOpsCommand(int argc, char** argv) {
  Flags f;
  FlagSet flags(
      "ladder bench ops",
      "Every backend op on a GPT-2 124M layer's shapes, timed against its floor: max(bytes / "
      "copy bandwidth, FLOPs / matmul rate), both measured through the same backend in the same "
      "run. Prints floor/measured per op (1.0 = at the floor) and their geometric mean. Below "
      "--tokens 8192 the vocabulary, AdamW's parameters and the copy buffer shrink in "
      "proportion (so small runs stay small) unless --vocab/--params are given.");
  AddDeviceFlag(flags, &f.device);
  flags.Int("tokens", &f.tokens, "B*T rows; T = min(1024, tokens), and tokens a multiple of T");
  flags.Int("reps", &f.reps, "timed calls per op, after one untimed; the best counts");
  flags.Int("vocab", &f.vocab, "real vocabulary of the embedding and cross-entropy",
            "50257 x tokens/8192, at least 128");
  flags.Int("params", &f.params, "parameters of the AdamW update and SumOfSquares",
            "124475904 x tokens/8192, at least 1024");
  flags.String("out", &f.out, "also write the table here, tab-separated with a header line",
               "none");
  return RunCommand(flags, argc, argv, [&] { return Run(f); });
}

}  // namespace ladder
