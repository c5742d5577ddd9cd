// Softmax cross-entropy over a vocabulary shard, one row (token) at a time.
//
// The logits are the largest tensor of the model ([N, Vp], 50304 columns for
// GPT-2), so under tensor parallelism each rank keeps only its columns
// [vocab_start, vocab_start + Vshard) and the full row is never gathered.
// logsumexp splits into per-shard pieces that only need [N]-sized reductions:
//   m   = max_k (max of shard k)                       (all-reduce MAX)
//   s   = sum_k (sum over shard k of exp(x - m))       (all-reduce SUM)
//   x_t = sum_k (target's logit if shard k holds it, else 0)   (SUM)
//   lse = m + log(s),  loss = lse - x_t
// Subtracting the *global* max before exp keeps every term <= 1 and the
// largest exactly 1, as in the single-row softmax. The backward recomputes the
// probabilities as exp(x - lse) from the saved lse alone, so each shard writes
// its own columns of dlogits with no communication, over the logits in place.
// One process is the shard holding the whole vocabulary: the three ops run
// back to back with nothing in between, and CrossEntropyFused does their
// arithmetic and the backward's row by row (at the end of this file).
//
// Columns whose global index is >= V are vocabulary padding (Vp is a multiple
// of 128 for GEMM-friendly shapes); they take no part in the softmax and get 0
// gradient. A shard may hold only padding: its max is the lowest finite float
// and its sum 0, which leave the reductions unchanged.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"

namespace ladder {
namespace {

constexpr char kMax[] = "CrossEntropyRowMax";
constexpr char kPartials[] = "CrossEntropyPartials";
constexpr char kLoss[] = "CrossEntropyLoss";
constexpr char kBwd[] = "CrossEntropyBackward";

// The row view [N, Vshard] of the logits and the number of the shard's real
// (non-padding) columns, max(0, min(Vshard, V - vocab_start)).
absl::Status CheckShard(absl::string_view op, const Tensor& logits, int64_t vocab_start,
                        int vocab_size, int64_t* N, int64_t* Vs, int64_t* real) {
  RETURN_IF_ERROR(CheckVocabShard(Device::kCpu, op, logits, DType::kF32, vocab_start, vocab_size, N, Vs));
  *real = std::clamp<int64_t>(vocab_size - vocab_start, 0, *Vs);
  return absl::OkStatus();
}

absl::Status CheckTargets(absl::string_view op, const Tensor& targets, int64_t N, int vocab_size) {
  RETURN_IF_ERROR(cpu::CheckNumel(op, "targets", targets, DType::kI32, N));
  const int32_t* t = targets.i32();
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] < 0 || t[n] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": targets[", n, "] = ", t[n], " is outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// The per-row arithmetic, one definition each for the separate ops and the
// fused one (which must give their bits).

// exp(x[i] - m), the terms of a row's sum of exps.
inline auto ExpMinus(const float* x, float m) {
  return [x, m](int64_t i) { return cpu::ExpF(x[i] - m); };
}

// The target's logit if this shard holds it (j = target - vocab_start), else 0.
inline float TargetLogit(const float* x, int64_t j, int64_t real) {
  return j >= 0 && j < real ? x[j] : 0.0f;
}

// A row's log-sum-exp and loss from its max, sum of exps and target logit.
inline void RowLoss(float m, float sum_exp, float target_logit, float* lse, float* loss) {
  const float log_s = std::log(sum_exp);
  *lse = m + log_s;
  // (m - x_t) + log s rather than lse - x_t: m - x_t is exact when the two
  // are close, so a confident prediction's small loss keeps its digits.
  *loss = (m - target_logit) + log_s;
}

// A row's dlogits over its Vs columns, from its lse: (softmax - onehot) *
// dloss on the real columns, 0 on the padding. d may be x itself: each
// element is read, then written.
inline void RowGradient(float* d, const float* x, float lse, int64_t j, int64_t real, int64_t Vs,
                        float dloss) {
  // `omp simd` tells the compiler d and x are either disjoint or identical
  // (no loop-carried dependence), so it vectorizes without an alias check.
#pragma omp simd
  for (int64_t i = 0; i < real; ++i) d[i] = cpu::ExpF(x[i] - lse) * dloss;
  if (j >= 0 && j < real) d[j] -= dloss;
  for (int64_t i = real; i < Vs; ++i) d[i] = 0.0f;
}

}  // namespace

absl::Status CpuBackend::CrossEntropyRowMax(Tensor row_max, Tensor logits, int64_t vocab_start,
                                            int vocab_size) {
  int64_t N = 0, Vs = 0, real = 0;
  RETURN_IF_ERROR(CheckShard(kMax, logits, vocab_start, vocab_size, &N, &Vs, &real));
  RETURN_IF_ERROR(cpu::CheckNumel(kMax, "row_max", row_max, DType::kF32, N));
  const float* lg = logits.f32();
  float* mx = row_max.f32();
  if (real == 0) {
    for (int64_t n = 0; n < N; ++n) mx[n] = -FLT_MAX;
    return absl::OkStatus();
  }
#pragma omp parallel for schedule(static) if (N * real >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) mx[n] = cpu::LaneMax(lg + n * Vs, real);
  return absl::OkStatus();
}

absl::Status CpuBackend::CrossEntropyPartials(Tensor sum_exp, Tensor target_logit, Tensor logits,
                                              Tensor targets, Tensor row_max, int64_t vocab_start,
                                              int vocab_size) {
  int64_t N = 0, Vs = 0, real = 0;
  RETURN_IF_ERROR(CheckShard(kPartials, logits, vocab_start, vocab_size, &N, &Vs, &real));
  RETURN_IF_ERROR(CheckTargets(kPartials, targets, N, vocab_size));
  RETURN_IF_ERROR(cpu::CheckNumel(kPartials, "row_max", row_max, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kPartials, "sum_exp", sum_exp, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kPartials, "target_logit", target_logit, DType::kF32, N));
  const float* lg = logits.f32();
  const int32_t* tg = targets.i32();
  const float* mx = row_max.f32();
  float* se = sum_exp.f32();
  float* tl = target_logit.f32();
#pragma omp parallel for schedule(static) if (N * real >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = lg + n * Vs;
    se[n] = cpu::LaneSum(real, ExpMinus(x, mx[n]));
    tl[n] = TargetLogit(x, int64_t{tg[n]} - vocab_start, real);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::CrossEntropyLoss(Tensor losses, Tensor lse, Tensor row_max, Tensor sum_exp,
                                          Tensor target_logit) {
  // Every tensor holds N = losses.numel() elements (any shape: [N] or [B,T]).
  const int64_t N = losses.numel();
  RETURN_IF_ERROR(cpu::CheckNumel(kLoss, "losses", losses, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kLoss, "lse", lse, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kLoss, "row_max", row_max, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kLoss, "sum_exp", sum_exp, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kLoss, "target_logit", target_logit, DType::kF32, N));
  float* loss = losses.f32();
  float* ls = lse.f32();
  const float* mx = row_max.f32();
  const float* se = sum_exp.f32();
  const float* tl = target_logit.f32();
#pragma omp parallel for schedule(static) if (N >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) RowLoss(mx[n], se[n], tl[n], &ls[n], &loss[n]);
  return absl::OkStatus();
}

absl::Status CpuBackend::CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets,
                                              Tensor lse, int64_t vocab_start, int vocab_size,
                                              float dloss) {
  int64_t N = 0, Vs = 0, real = 0;
  RETURN_IF_ERROR(CheckShard(kBwd, logits, vocab_start, vocab_size, &N, &Vs, &real));
  RETURN_IF_ERROR(CheckTargets(kBwd, targets, N, vocab_size));
  RETURN_IF_ERROR(cpu::CheckNumel(kBwd, "lse", lse, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckRows(kBwd, "dlogits", dlogits, DType::kF32, N, Vs));
  const float* lg = logits.f32();
  const int32_t* tg = targets.i32();
  const float* ls = lse.f32();
  float* dlg = dlogits.f32();
#pragma omp parallel for schedule(static) if (N * Vs >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    RowGradient(dlg + n * Vs, lg + n * Vs, ls[n], int64_t{tg[n]} - vocab_start, real, Vs, dloss);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::CrossEntropyFused(Tensor losses, Tensor lse, Tensor logits, Tensor targets,
                                           int vocab_size, float dloss) {
  constexpr char kFused[] = "CrossEntropyFused";
  int64_t N = 0, Vs = 0, real = 0;
  RETURN_IF_ERROR(CheckShard(kFused, logits, 0, vocab_size, &N, &Vs, &real));
  if (vocab_size > Vs) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFused, ": vocab_size ", vocab_size, " exceeds the rows' ", Vs, " columns"));
  }
  RETURN_IF_ERROR(CheckTargets(kFused, targets, N, vocab_size));
  RETURN_IF_ERROR(cpu::CheckNumel(kFused, "losses", losses, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kFused, "lse", lse, DType::kF32, N));
  float* lg = logits.f32();
  const int32_t* tg = targets.i32();
  float* loss = losses.f32();
  float* ls = lse.f32();
  // The four steps' arithmetic (the row helpers above, LaneSumAndMax keeping
  // LaneSum's and LaneMax's orders), so the bits are the unfused ones; what
  // changes is the order of the passes. Each thread takes a run of rows and,
  // for each, sums its exps while taking the next row's max in the same loop,
  // then writes its loss and its gradient while the row is still in cache.
  // As four ops, the max pass streamed the logits from memory with the exps
  // idle, and every row came from memory three times. bench ops'
  // CrossEntropyFused row, 8192 x 50304: 139-157 ms as four ops, 107-126 ms
  // so (alternating runs, docs/results.md).
#pragma omp parallel if (N * real >= cpu::kParallelMin)
  {
    const cpu::Range rows = cpu::ThreadRange(N, 1, omp_get_thread_num(), omp_get_num_threads());
    float m = rows.begin < rows.end ? cpu::LaneMax(lg + rows.begin * Vs, real) : 0.0f;
    for (int64_t n = rows.begin; n < rows.end; ++n) {
      float* x = lg + n * Vs;
      const float* next = n + 1 < rows.end ? x + Vs : x;
      float next_m = 0.0f;
      const float sum_exp = cpu::LaneSumAndMax(real, ExpMinus(x, m), next, &next_m);
      const int64_t j = tg[n];
      RowLoss(m, sum_exp, TargetLogit(x, j, real), &ls[n], &loss[n]);
      RowGradient(x, x, ls[n], j, real, Vs, dloss);
      m = next_m;
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
