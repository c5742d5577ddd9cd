// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/elementwise.h"

#include "kernels/elementwise.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kGeluFwd[] = "GeluForward";
constexpr char kGeluBwd[] = "GeluBackward";
constexpr char kAdd[] = "ResidualAdd";

}  // namespace

absl::Status GeluForward(Tensor out, Tensor inp, cudaStream_t stream) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(RowView(kGeluFwd, "inp", inp, DType::kF32, &N, &C));
  RETURN_IF_ERROR(CheckRows(kGeluFwd, "out", out, DType::kF32, N, C));
  return CudaStatus(kernels::LaunchGeluForward(out.f32(), inp.f32(), N * C, stream), kGeluFwd);
}

absl::Status GeluBackward(Tensor dinp, Tensor dout, Tensor inp, cudaStream_t stream) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(RowView(kGeluBwd, "inp", inp, DType::kF32, &N, &C));
  RETURN_IF_ERROR(CheckRows(kGeluBwd, "dout", dout, DType::kF32, N, C));
  RETURN_IF_ERROR(CheckRows(kGeluBwd, "dinp", dinp, DType::kF32, N, C));
  return CudaStatus(
      kernels::LaunchGeluBackward(dinp.f32(), dout.f32(), inp.f32(), N * C, stream), kGeluBwd);
}

absl::Status ResidualAdd(Tensor out, Tensor a, Tensor b, cudaStream_t stream) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(RowView(kAdd, "a", a, DType::kF32, &N, &C));
  RETURN_IF_ERROR(CheckRows(kAdd, "b", b, DType::kF32, N, C));
  RETURN_IF_ERROR(CheckRows(kAdd, "out", out, DType::kF32, N, C));
  return CudaStatus(kernels::LaunchResidualAdd(out.f32(), a.f32(), b.f32(), N * C, stream), kAdd);
}

LADDER_CUDA_END
