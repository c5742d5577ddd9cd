// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/residual_layernorm.h"

#include "kernels/residual_layernorm.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "ResidualLayerNormForward";
constexpr char kBwd[] = "ResidualLayerNormBackward";

}  // namespace

absl::Status ResidualLayerNormForward(Tensor residual_out, Tensor y, Tensor mean, Tensor rstd,
                                      Tensor residual_in, Tensor branch, Tensor gamma, Tensor beta,
                                      cudaStream_t stream) {
  // residual_in sets the storage dtype; every other activation and the
  // weights must share it (a mixed call is InvalidArgument), mean/rstd are f32.
  const DType dt = residual_in.dtype;
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(RowView(kFwd, "residual_in", residual_in, dt, &N, &C));
  const bool add = !branch.empty();
  if (add) {
    RETURN_IF_ERROR(CheckRows(kFwd, "branch", branch, dt, N, C));
    RETURN_IF_ERROR(CheckRows(kFwd, "residual_out", residual_out, dt, N, C));
  } else if (!residual_out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFwd, ": branch is empty (no residual add) but residual_out is not; pass it empty"));
  }
  RETURN_IF_ERROR(CheckRows(kFwd, "y", y, dt, N, C));
  RETURN_IF_ERROR(CheckNumel(kFwd, "mean", mean, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kFwd, "rstd", rstd, DType::kF32, N));
  RETURN_IF_ERROR(CheckExact(kFwd, "gamma", gamma, dt, {C}));
  RETURN_IF_ERROR(CheckExact(kFwd, "beta", beta, dt, {C}));

  return WithStorage(kFwd, "residual_in", dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(kernels::LaunchResidualLayerNormForward<T>(
                          add ? Data<T>(residual_out) : nullptr, Data<T>(y), mean.f32(), rstd.f32(),
                          Data<T>(residual_in), add ? Data<T>(branch) : nullptr, Data<T>(gamma),
                          Data<T>(beta), static_cast<int>(N), static_cast<int>(C), stream),
                      kFwd);
  });
}

int64_t ResidualLayerNormBackwardScratchFloats(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0 || rows > INT_MAX || cols > INT_MAX) return 0;
  return static_cast<int64_t>(kernels::ResidualLayerNormBackwardScratchFloats(
      static_cast<int>(rows), static_cast<int>(cols)));
}

absl::Status ResidualLayerNormBackward(Tensor d_residual, Tensor dgamma, Tensor dbeta, Tensor dy,
                                       Tensor x, Tensor gamma, Tensor mean, Tensor rstd,
                                       Tensor scratch, cudaStream_t stream) {
  // x sets the storage dtype of d_residual, dy and gamma; dgamma, dbeta,
  // mean, rstd and the scratch are f32.
  const DType dt = x.dtype;
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(RowView(kBwd, "x", x, dt, &N, &C));
  RETURN_IF_ERROR(CheckRows(kBwd, "dy", dy, dt, N, C));
  RETURN_IF_ERROR(CheckRows(kBwd, "d_residual", d_residual, dt, N, C));
  RETURN_IF_ERROR(CheckNumel(kBwd, "mean", mean, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kBwd, "rstd", rstd, DType::kF32, N));
  RETURN_IF_ERROR(CheckExact(kBwd, "gamma", gamma, dt, {C}));
  RETURN_IF_ERROR(CheckExact(kBwd, "dgamma", dgamma, DType::kF32, {C}));
  RETURN_IF_ERROR(CheckExact(kBwd, "dbeta", dbeta, DType::kF32, {C}));
  const int64_t need = ResidualLayerNormBackwardScratchFloats(N, C);
  if (need > 0) RETURN_IF_ERROR(CheckNumel(kBwd, "scratch", scratch, DType::kF32, need, true));

  return WithStorage(kBwd, "x", dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(kernels::LaunchResidualLayerNormBackward<T>(
                          Data<T>(d_residual), dgamma.f32(), dbeta.f32(), scratch.f32(),
                          Data<T>(dy), Data<T>(x), Data<T>(gamma), mean.f32(), rstd.f32(),
                          static_cast<int>(N), static_cast<int>(C), stream),
                      kBwd);
  });
}

LADDER_CUDA_END
