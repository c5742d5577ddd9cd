// Residual add fused with LayerNorm (and the residual add alone, for the
// pipeline stage boundary):
//   residual_out = residual_in + branch
//   y = (residual_out - mean) * rstd * gamma + beta,  rstd = 1/sqrt(var + 1e-5)
//
// Every transformer block ends a sub-layer with "add the branch to the residual
// stream, then normalize it for the next sub-layer". Doing both while the row
// is in cache reads the stream once instead of twice. mean and rstd are saved so
// the backward need not recompute them.
//
// Backward, per row, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// dx is *added* to d_residual: the residual stream's gradient arrives from the
// layer above and this branch adds its share. dgamma = sum_rows dy * xhat and
// dbeta = sum_rows dy are reductions over rows; for determinism they are summed
// per fixed chunk of rows into a partial buffer, and the partials are then
// added in chunk order, so neither threads nor their scheduling change a bit.
#include <algorithm>
#include <cmath>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "ResidualLayerNormForward";
constexpr char kBwd[] = "ResidualLayerNormBackward";
constexpr char kAdd[] = "ResidualAdd";
constexpr float kEps = 1e-5f;
// Rows per partial-sum chunk of dgamma/dbeta (fixed: it sets the sum order).
constexpr int64_t kRowsPerChunk = 32;

}  // namespace

absl::Status CpuBackend::ResidualLayerNormForward(Tensor residual_out, Tensor y, Tensor mean,
                                                  Tensor rstd, Tensor residual_in, Tensor branch,
                                                  Tensor gamma, Tensor beta) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(cpu::RowView(kFwd, "residual_in", residual_in, DType::kF32, &N, &C));
  const bool add = !branch.empty();
  if (add) {
    RETURN_IF_ERROR(cpu::CheckRows(kFwd, "branch", branch, DType::kF32, N, C));
    RETURN_IF_ERROR(cpu::CheckRows(kFwd, "residual_out", residual_out, DType::kF32, N, C));
  } else if (!residual_out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFwd, ": branch is empty (no residual add) but residual_out is not; pass it empty"));
  }
  RETURN_IF_ERROR(cpu::CheckRows(kFwd, "y", y, DType::kF32, N, C));
  RETURN_IF_ERROR(cpu::CheckNumel(kFwd, "mean", mean, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kFwd, "rstd", rstd, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckExact(kFwd, "gamma", gamma, DType::kF32, {C}));
  RETURN_IF_ERROR(cpu::CheckExact(kFwd, "beta", beta, DType::kF32, {C}));

  const float* in_p = residual_in.f32();
  const float* br_p = add ? branch.f32() : nullptr;
  float* res_p = add ? residual_out.f32() : nullptr;
  float* y_p = y.f32();
  float* mean_p = mean.f32();
  float* rstd_p = rstd.f32();
  const float* g = gamma.f32();
  const float* b = beta.f32();
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = in_p + n * C;
    if (add) {
      const float* br = br_p + n * C;
      float* r = res_p + n * C;
      for (int64_t c = 0; c < C; ++c) r[c] = x[c] + br[c];
      x = r;
    }
    // Two passes over the (cached) row: mean first, then the variance around
    // it, which avoids the cancellation of E[x^2] - E[x]^2.
    const float m = cpu::LaneSum(C, [x](int64_t i) { return x[i]; }) * inv_c;
    auto sq_dev = [x, m](int64_t i) {
      const float d = x[i] - m;
      return d * d;
    };
    const float var = cpu::LaneSum(C, sq_dev) * inv_c;
    const float s = 1.0f / std::sqrt(var + kEps);
    float* yr = y_p + n * C;
    for (int64_t c = 0; c < C; ++c) yr[c] = (x[c] - m) * s * g[c] + b[c];
    mean_p[n] = m;
    rstd_p[n] = s;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ResidualLayerNormBackward(Tensor d_residual, Tensor dgamma, Tensor dbeta,
                                                   Tensor dy, Tensor x, Tensor gamma, Tensor mean,
                                                   Tensor rstd) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(cpu::RowView(kBwd, "x", x, DType::kF32, &N, &C));
  RETURN_IF_ERROR(cpu::CheckRows(kBwd, "dy", dy, DType::kF32, N, C));
  RETURN_IF_ERROR(cpu::CheckRows(kBwd, "d_residual", d_residual, DType::kF32, N, C));
  RETURN_IF_ERROR(cpu::CheckNumel(kBwd, "mean", mean, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kBwd, "rstd", rstd, DType::kF32, N));
  RETURN_IF_ERROR(cpu::CheckExact(kBwd, "gamma", gamma, DType::kF32, {C}));
  RETURN_IF_ERROR(cpu::CheckExact(kBwd, "dgamma", dgamma, DType::kF32, {C}));
  RETURN_IF_ERROR(cpu::CheckExact(kBwd, "dbeta", dbeta, DType::kF32, {C}));

  const float* x_p = x.f32();
  const float* dy_p = dy.f32();
  float* dr_p = d_residual.f32();
  const float* mean_p = mean.f32();
  const float* rstd_p = rstd.f32();
  const float* g = gamma.f32();
  const float inv_c = 1.0f / static_cast<float>(C);

  // partial[k] holds chunk k's [dgamma | dbeta] (2C floats).
  const int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  float* partial = cpu::ScratchFloats(static_cast<size_t>(chunks * 2 * C));
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pg = partial + k * 2 * C;
    float* pb = pg + C;
    for (int64_t c = 0; c < C; ++c) pg[c] = pb[c] = 0.0f;
    const int64_t n_end = std::min(N, (k + 1) * kRowsPerChunk);
    for (int64_t n = k * kRowsPerChunk; n < n_end; ++n) {
      const float* xr = x_p + n * C;
      const float* dyr = dy_p + n * C;
      float* dr = dr_p + n * C;
      const float m = mean_p[n], s = rstd_p[n];
      float sum_g, sum_gx;
      cpu::LaneSum2(
          C, [&](int64_t i) { return dyr[i] * g[i]; },
          [&](int64_t i) { return dyr[i] * g[i] * ((xr[i] - m) * s); }, &sum_g, &sum_gx);
      const float mean_g = sum_g * inv_c, mean_gx = sum_gx * inv_c;
      // Six streams are too many for the compiler's runtime alias checks;
      // `omp simd` states there is no loop-carried dependence.
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (xr[c] - m) * s;
        const float gc = dyr[c] * g[c];
        dr[c] += s * (gc - mean_g - xhat * mean_gx);
        pg[c] += dyr[c] * xhat;
        pb[c] += dyr[c];
      }
    }
  }
  // Add the partials in chunk order; each thread owns a slice of channels.
  float* dg = dgamma.f32();
  float* db = dbeta.f32();
#pragma omp parallel if (chunks * C >= cpu::kParallelMin)
  {
    const cpu::Range r = cpu::ThreadRange(C, 16, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t k = 0; k < chunks; ++k) {
      const float* pg = partial + k * 2 * C;
      const float* pb = pg + C;
      for (int64_t c = r.begin; c < r.end; ++c) {
        dg[c] += pg[c];
        db[c] += pb[c];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ResidualAdd(Tensor out, Tensor a, Tensor b) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(cpu::RowView(kAdd, "a", a, DType::kF32, &N, &C));
  RETURN_IF_ERROR(cpu::CheckRows(kAdd, "b", b, DType::kF32, N, C));
  RETURN_IF_ERROR(cpu::CheckRows(kAdd, "out", out, DType::kF32, N, C));
  const float* ap = a.f32();
  const float* bp = b.f32();
  float* op = out.f32();
  const int64_t n = N * C;
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) op[i] = ap[i] + bp[i];
  return absl::OkStatus();
}

}  // namespace ladder
