// Softmax fused with cross-entropy, one row (token) at a time:
//   loss[n]    = logsumexp(logits[n,:V]) - logits[n,target]
//   dlogits[n] = dloss * (softmax(logits[n,:V]) - onehot(target)), 0 for cols >= V
//
// The probabilities are never stored: N x Vp floats is the largest tensor of
// the whole model (50304 columns for GPT-2), so the backward recomputes them
// from the logits and writes the gradient over the logits in place. Each row
// subtracts its max before exp, so exp never overflows and the largest term is
// exactly 1. Columns >= V are vocabulary padding (Vp is a multiple of 128 for
// GEMM-friendly shapes); they take no part in the softmax and get 0 gradient.
#include <cmath>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "CrossEntropyForward";
constexpr char kBwd[] = "CrossEntropyBackward";

absl::Status CheckCrossEntropy(absl::string_view op, const Tensor& logits, const Tensor& targets,
                               int vocab_size, int64_t* N, int64_t* Vp) {
  RETURN_IF_ERROR(cpu::RowView(op, "logits", logits, DType::kF32, N, Vp));
  if (vocab_size < 1 || vocab_size > *Vp) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": vocab_size ", vocab_size, " is outside [1, ", *Vp, "]"));
  }
  RETURN_IF_ERROR(cpu::CheckNumel(op, "targets", targets, DType::kI32, *N));
  const int32_t* t = targets.i32();
  for (int64_t n = 0; n < *N; ++n) {
    if (t[n] < 0 || t[n] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": targets[", n, "] = ", t[n], " is outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// The row's max and sum of exp(x - max) over the first V columns.
inline void RowSoftmaxStats(const float* x, int64_t V, float* max, float* sum) {
  const float m = cpu::LaneMax(x, V);
  *max = m;
  *sum = cpu::LaneSum(V, [x, m](int64_t i) { return cpu::ExpF(x[i] - m); });
}

}  // namespace

absl::Status CpuBackend::CrossEntropyForward(Tensor losses, Tensor logits, Tensor targets,
                                             int vocab_size) {
  int64_t N = 0, Vp = 0;
  RETURN_IF_ERROR(CheckCrossEntropy(kFwd, logits, targets, vocab_size, &N, &Vp));
  RETURN_IF_ERROR(cpu::CheckNumel(kFwd, "losses", losses, DType::kF32, N));
  const float* lg = logits.f32();
  const int32_t* tg = targets.i32();
  float* loss = losses.f32();
  const int64_t V = vocab_size;
#pragma omp parallel for schedule(static) if (N * V >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = lg + n * Vp;
    float m, s;
    RowSoftmaxStats(x, V, &m, &s);
    loss[n] = (m - x[tg[n]]) + std::log(s);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets,
                                              int vocab_size, float dloss) {
  int64_t N = 0, Vp = 0;
  RETURN_IF_ERROR(CheckCrossEntropy(kBwd, logits, targets, vocab_size, &N, &Vp));
  RETURN_IF_ERROR(cpu::CheckRows(kBwd, "dlogits", dlogits, DType::kF32, N, Vp));
  const float* lg = logits.f32();
  const int32_t* tg = targets.i32();
  float* dlg = dlogits.f32();
  const int64_t V = vocab_size;
#pragma omp parallel for schedule(static) if (N * V >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = lg + n * Vp;
    float* d = dlg + n * Vp;  // may be x itself: each element is read, then written
    float m, s;
    RowSoftmaxStats(x, V, &m, &s);
    const float scale = dloss / s;
    // `omp simd` tells the compiler d and x are either disjoint or identical
    // (no loop-carried dependence), so it vectorizes without an alias check.
#pragma omp simd
    for (int64_t i = 0; i < V; ++i) d[i] = cpu::ExpF(x[i] - m) * scale;
    d[tg[n]] -= dloss;
    for (int64_t i = V; i < Vp; ++i) d[i] = 0.0f;
  }
  return absl::OkStatus();
}

}  // namespace ladder
