// Optimizer-side ops: the gradient-norm reduction, AdamW (with the bf16 copy
// of the weights it may write), RoundToBf16 and Fill.
//
// SumOfSquares feeds gradient clipping, and the clip scale multiplies every
// gradient, so its bits must not depend on how threads were scheduled. The
// input is cut into fixed-size chunks; each chunk's sum (double, in a fixed
// lane order) goes to its own slot, and the slots are added in chunk order on
// one thread; the total is rounded to float once, into the output element.
// Same input, same bits, whatever the thread count.
//
// AdamW: per element kernels/adamw_element.h, the definition the CUDA kernel
// compiles too (same bits). One fused pass reads param, grad, m, v once and
// writes param, m, v.
#include <algorithm>
#include <cmath>

#include "kernels/adamw_element.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/core/bf16.h"
#include "src/core/philox.h"

namespace ladder {
namespace {

// Elements per SumOfSquares chunk (fixed: it sets the summation order).
constexpr int64_t kSumChunk = 1 << 14;

// sum x[i]^2 in double with 8 fixed lanes.
double ChunkSumOfSquares(const float* x, int64_t n) {
  constexpr int kL = 8;
  double acc[kL] = {};
  int64_t i = 0;
  for (; i + kL <= n; i += kL) {
    for (int j = 0; j < kL; ++j) {
      const double v = x[i + j];
      acc[j] += v * v;
    }
  }
  for (int j = 0; i + j < n; ++j) {
    const double v = x[i + j];
    acc[j] += v * v;
  }
  for (int w = kL / 2; w > 0; w /= 2) {
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

// AdamW over n elements, then round(&w[i], i) on each updated weight. A
// template so that the fp32 update (round does nothing) has no branch in its
// loop and vectorizes, sqrt and division included (IEEE-rounded in SIMD as
// in scalar code, so the bits do not change).
template <typename Round>
void AdamWLoop(int64_t n, float* w, const float* g, float* m1, float* m2, float wd,
               const AdamWScalars& s, Round round) {
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    AdamWElement(w[i], g[i], m1[i], m2[i], wd, s);
    round(w + i, i);
  }
}

}  // namespace

absl::Status CpuBackend::SumOfSquares(Tensor x, Tensor out) {
  constexpr char kOp[] = "SumOfSquares";
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(cpu::RowView(kOp, "x", x, DType::kF32, &rows, &cols));
  RETURN_IF_ERROR(cpu::CheckNumel(kOp, "out", out, DType::kF32, 1));
  const int64_t n = rows * cols;
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  double* slot = cpu::ScratchDoubles(static_cast<size_t>(chunks));
  const float* p = x.f32();
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t begin = k * kSumChunk;
    slot[k] = ChunkSumOfSquares(p + begin, std::min(kSumChunk, n - begin));
  }
  double sum = 0.0;
  for (int64_t k = 0; k < chunks; ++k) sum += slot[k];
  out.f32()[0] = static_cast<float>(sum);
  return absl::OkStatus();
}

absl::Status CpuBackend::AdamWUpdate(const std::vector<AdamWTensor>& tensors,
                                     const AdamWParams& p) {
  constexpr char kOp[] = "AdamWUpdate";
  if (p.step < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": step ", p.step, " must be >= 1"));
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    int64_t n = 0;
    RETURN_IF_ERROR(CheckAdamWTensor(Device::kCpu, kOp, k, tensors[k], &n));
  }
  const AdamWScalars s = MakeAdamWScalars(p.lr, p.beta1, p.beta2, p.eps, p.grad_scale, p.step);
  for (const AdamWTensor& t : tensors) {
    const int64_t n = t.param.numel();
    const float wd = t.weight_decay;
    float* w = t.param.f32();
    const float* g = t.grad.f32();
    float* m1 = t.m.f32();
    float* m2 = t.v.f32();
    bf16* w16 = t.param16.empty() ? nullptr : t.param16.bf16();
    const int64_t round_base = t.round_offset;
    if (w16 == nullptr) {
      AdamWLoop(n, w, g, m1, m2, wd, s, [](float*, int64_t) {});
    } else {
      AdamWLoop(n, w, g, m1, m2, wd, s, [&](float* wi, int64_t i) {
        w16[i] = FloatToBf16Stochastic(
            *wi, RoundingWord(p.round_seed, static_cast<uint64_t>(p.step), round_base + i));
      });
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr) {
  RETURN_IF_ERROR(CheckRoundToBf16(Device::kCpu, "RoundToBf16", dst, src));
  const int64_t n = src.numel();
  const float* s = src.f32();
  bf16* d = dst.bf16();
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    d[i] = sr == nullptr
               ? FloatToBf16(s[i])
               : FloatToBf16Stochastic(s[i], RoundingWord(sr->seed, sr->step, sr->offset + i));
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Fill(Tensor x, float value) {
  if (!x.empty() && x.dtype == DType::kBF16) {
    RETURN_IF_ERROR(cpu::CheckNumel("Fill", "x", x, DType::kBF16, x.numel()));
    std::fill_n(x.bf16(), x.numel(), FloatToBf16(value));
    return absl::OkStatus();
  }
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(cpu::RowView("Fill", "x", x, DType::kF32, &rows, &cols));
  const int64_t n = rows * cols;
  float* p = x.f32();
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
  return absl::OkStatus();
}

}  // namespace ladder
