// Fill: x[i] = value. cudaMemset writes bytes, so it can set a float tensor
// only to values whose four bytes are equal (0, or NaN as 0xff); anything
// else (1.0 for a LayerNorm's gamma, a constant loss gradient) takes this
// kernel. It writes 4n bytes and computes nothing: bound by bandwidth, so one
// float per thread in a grid-stride loop over at most kMaxBlocks blocks of
// 256 threads, consecutive threads on consecutive floats (coalesced).
#include <algorithm>
#include <cstdint>

#include "kernels/launch.cuh"
#include "kernels/memory.h"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

__global__ void __launch_bounds__(kThreads)
    FillKernel(float* __restrict__ x, int64_t n, float value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    x[i] = value;
  }
}

}  // namespace

cudaError_t LaunchFill(float* x, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads);
  return Launch<FillKernel>(static_cast<unsigned>(blocks), kThreads, 0, stream, x, n, value);
}

LADDER_KERNELS_END
