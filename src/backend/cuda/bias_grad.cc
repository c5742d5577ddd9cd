// Validates shapes, dtypes and devices, then calls the kernel launcher.
#include "src/backend/cuda/bias_grad.h"

#include "kernels/bias_grad.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kOp[] = "BiasGrad";

}  // namespace

int64_t BiasGradScratchFloats(int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0 || rows > INT_MAX || cols > INT_MAX) return 0;
  return static_cast<int64_t>(
      kernels::BiasGradScratchFloats(static_cast<int>(rows), static_cast<int>(cols)));
}

absl::Status BiasGrad(Tensor dbias, Tensor dout, Tensor scratch, cudaStream_t stream) {
  int64_t N = 0, OC = 0;
  RETURN_IF_ERROR(RowView(kOp, "dout", dout, dout.dtype, &N, &OC));
  RETURN_IF_ERROR(CheckExact(kOp, "dbias", dbias, DType::kF32, {OC}));
  const int64_t need = BiasGradScratchFloats(N, OC);
  if (need > 0) RETURN_IF_ERROR(CheckNumel(kOp, "scratch", scratch, DType::kF32, need, true));
  return WithStorage(kOp, "dout", dout.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(kernels::LaunchBiasGrad<T>(dbias.f32(), Data<T>(dout), scratch.f32(),
                                                 static_cast<int>(N), static_cast<int>(OC), stream),
                      kOp);
  });
}

LADDER_CUDA_END
