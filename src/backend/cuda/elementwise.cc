// Validates shapes, dtypes and devices, then calls the kernel launchers.
// One storage dtype per call (backend.h "Precision"): the first tensor named
// sets it (f32 or bf16), and every other tensor must share it.
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
  RETURN_IF_ERROR(RowView(kGeluFwd, "inp", inp, inp.dtype, &N, &C));
  RETURN_IF_ERROR(CheckRows(kGeluFwd, "out", out, inp.dtype, N, C));
  return WithStorage(kGeluFwd, "inp", inp.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(kernels::LaunchGeluForward<T>(Data<T>(out), Data<T>(inp), N * C, stream),
                      kGeluFwd);
  });
}

absl::Status GeluBackward(Tensor dinp, Tensor dout, Tensor inp, cudaStream_t stream) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(RowView(kGeluBwd, "inp", inp, inp.dtype, &N, &C));
  RETURN_IF_ERROR(CheckRows(kGeluBwd, "dout", dout, inp.dtype, N, C));
  RETURN_IF_ERROR(CheckRows(kGeluBwd, "dinp", dinp, inp.dtype, N, C));
  return WithStorage(kGeluBwd, "inp", inp.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchGeluBackward<T>(Data<T>(dinp), Data<T>(dout), Data<T>(inp), N * C, stream),
        kGeluBwd);
  });
}

absl::Status ResidualAdd(Tensor out, Tensor a, Tensor b, cudaStream_t stream) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(RowView(kAdd, "a", a, a.dtype, &N, &C));
  RETURN_IF_ERROR(CheckRows(kAdd, "b", b, a.dtype, N, C));
  RETURN_IF_ERROR(CheckRows(kAdd, "out", out, a.dtype, N, C));
  return WithStorage(kAdd, "a", a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchResidualAdd<T>(Data<T>(out), Data<T>(a), Data<T>(b), N * C, stream), kAdd);
  });
}

LADDER_CUDA_END
