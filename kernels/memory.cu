// Fill: x[i] = value, for f32 or bf16 tensors. cudaMemset writes bytes, so
// it can set a tensor only to values whose bytes are all equal (0, or NaN as
// 0xff); anything else (1.0 for a LayerNorm's gamma, a constant loss
// gradient) takes this kernel. It writes 4n (f32) or 2n (bf16) bytes and
// computes nothing: bound by bandwidth, so one element per thread in a
// grid-stride loop over at most kMaxBlocks blocks of 256 threads,
// consecutive threads on consecutive elements (coalesced).
#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/memory.h"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

template <typename T>
__global__ void __launch_bounds__(kThreads) FillKernel(T* __restrict__ x, int64_t n, float value) {
  const T v = FromFloat<T>(value);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    x[i] = v;
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchFill(T* x, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads);
  return Launch<FillKernel<T>>(static_cast<unsigned>(blocks), kThreads, 0, stream, x, n, value);
}

template cudaError_t LaunchFill<float>(float*, int64_t, float, cudaStream_t);
template cudaError_t LaunchFill<__nv_bfloat16>(__nv_bfloat16*, int64_t, float, cudaStream_t);

LADDER_KERNELS_END
