// Elementwise kernels: GELU forward and backward, and the residual add.
//
// Storage: every tensor of a call is T, float or __nv_bfloat16 (backend.h
// "Precision"); the arithmetic is fp32 whatever T is. A bf16 element is
// widened exactly on load and the result rounded once, to nearest even, on
// store. Bytes per element are therefore s = sizeof(T), 4 or 2.
//
// What they fuse: nothing across ops; each is one pass that reads its inputs
// once and writes its output once. GELU's polynomial, exp and reciprocal are
// computed in registers between the load and the store, so the op costs
// exactly its bytes:
//   GeluForward    reads s*n, writes s*n bytes; ~12 FLOPs + 1 exp per element
//   GeluBackward   reads 2s*n, writes s*n bytes; ~20 FLOPs + 1 exp per element
//   ResidualAdd    reads 2s*n, writes s*n bytes; 1 FLOP per element
// At most ~2 FLOPs per byte in fp32 (~4 in bf16; the add: 1 per 3s), all
// three are bound by memory bandwidth: an H100/H200 needs ~15-20 fp32 FLOPs
// per byte of HBM traffic to be compute bound (67 TFLOPS over 3.4-4.8 TB/s),
// and bf16 storage halves the bytes, so halves the time. So the only thing
// that matters is moving the bytes efficiently: wide accesses (one 16-byte
// LDG.128/STG.128 per thread instead of four 4-byte or eight 2-byte ones, so
// a warp moves 512 contiguous bytes per instruction), enough of them in
// flight, and no second pass. The MLP's hidden activation (N x 4C) is the
// largest tensor of a block, so GELU's pass over it is worth getting right.
//
// The GELU formula is the CPU backend's (src/backend/cpu/gelu.cc), in the same
// order of operations: gelu(x) = x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3),
// and gelu'(x) = sig + 2 x sig (1 - sig) sqrt(2/pi)(1 + 3 * 0.044715 x^2). Only
// the exp differs (CUDA's expf vs the CPU's polynomial ExpF), and either
// compiler may contract a multiply and an add into one FMA; both move the
// fp32 result by a few ulp (more, in absolute terms, where gelu' computes
// 1 - sigmoid for large x: see tests/gpu/elementwise_test.cc). The residual
// add is a single fp32 add: bitwise the CPU's in fp32, and in bf16 that sum
// rounded once.
//
// Launch shape: 256 threads per block, each thread handling one 16-byte vector
// (kVec = kVec16<T>: 4 floats or 8 bf16) per trip of a grid-stride loop, and
// at most kMaxBlocks blocks (enough to fill every SM of an H100/H200 several
// times over; a larger tensor loops). The vector path needs every pointer
// 16-byte aligned; it handles the n % kVec trailing elements with scalar
// accesses in the same launch. Misaligned views (an offset that is not a
// multiple of 16 bytes) take the kVec = 1 instantiation.
// No element depends on another, so aliasing an output with an input is safe:
// each thread loads its element (vector) before storing to the same place.
#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/elementwise.h"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

// sigmoid(2u) = 0.5 (1 + tanh(u)), without tanh's cancellation for x << 0.
__device__ __forceinline__ float GeluSigmoid(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

struct GeluForwardOp {
  __device__ __forceinline__ float operator()(float x) const { return x * GeluSigmoid(x); }
};

struct GeluBackwardOp {  // (dout, inp) -> dinp
  __device__ __forceinline__ float operator()(float d, float x) const {
    const float sig = GeluSigmoid(x);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    return d * (sig + 2.0f * x * sig * (1.0f - sig) * du);
  }
};

struct AddOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// out[i] = op(a[i]) or op(a[i], b[i]) (kInputs = 1 or 2), in fp32 between a
// widening load and a rounding store. No __restrict__: out may alias an input.
template <typename Op, int kInputs, typename T, int kVec>
__global__ void __launch_bounds__(kThreads) MapKernel(T* out, const T* a, const T* b, int64_t n) {
  const Op op;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t nvec = n / kVec;
  for (int64_t v = tid; v < nvec; v += stride) {
    const int64_t i = v * kVec;
    Vec<T, kVec> x = LoadVec<kVec>(a + i);
    if constexpr (kInputs == 2) {
      const Vec<T, kVec> y = LoadVec<kVec>(b + i);
#pragma unroll
      for (int k = 0; k < kVec; ++k) x.v[k] = FromFloat<T>(op(ToFloat(x.v[k]), ToFloat(y.v[k])));
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) x.v[k] = FromFloat<T>(op(ToFloat(x.v[k])));
    }
    StoreVec<kVec>(out + i, x);
  }
  // The n % kVec trailing elements (none when kVec == 1), one per thread.
  const int64_t i = nvec * kVec + tid;
  if (i < n) {
    if constexpr (kInputs == 2) {
      out[i] = FromFloat<T>(op(ToFloat(a[i]), ToFloat(b[i])));
    } else {
      out[i] = FromFloat<T>(op(ToFloat(a[i])));
    }
  }
}

template <typename Op, int kInputs, typename T>
cudaError_t LaunchMap(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kWide = kVec16<T>;
  const bool vec = Aligned16(out) && Aligned16(a) && (kInputs == 1 || Aligned16(b));
  const int kVec = vec ? kWide : 1;
  // At least one thread per trailing element, at least one vector per thread.
  const int64_t work = std::max<int64_t>(n / kVec, 1);
  const int blocks = static_cast<int>(std::min((work + kThreads - 1) / kThreads, kMaxBlocks));
  if (vec) {
    return Launch<MapKernel<Op, kInputs, T, kWide>>(blocks, kThreads, 0, stream, out, a, b, n);
  }
  return Launch<MapKernel<Op, kInputs, T, 1>>(blocks, kThreads, 0, stream, out, a, b, n);
}

}  // namespace

template <typename T>
cudaError_t LaunchGeluForward(T* out, const T* inp, int64_t n, cudaStream_t stream) {
  return LaunchMap<GeluForwardOp, 1, T>(out, inp, nullptr, n, stream);
}

template <typename T>
cudaError_t LaunchGeluBackward(T* dinp, const T* dout, const T* inp, int64_t n,
                               cudaStream_t stream) {
  return LaunchMap<GeluBackwardOp, 2, T>(dinp, dout, inp, n, stream);
}

template <typename T>
cudaError_t LaunchResidualAdd(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  return LaunchMap<AddOp, 2, T>(out, a, b, n, stream);
}

template cudaError_t LaunchGeluForward<float>(float*, const float*, int64_t, cudaStream_t);
template cudaError_t LaunchGeluBackward<float>(float*, const float*, const float*, int64_t,
                                               cudaStream_t);
template cudaError_t LaunchResidualAdd<float>(float*, const float*, const float*, int64_t,
                                              cudaStream_t);
template cudaError_t LaunchGeluForward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                                      cudaStream_t);
template cudaError_t LaunchGeluBackward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                                       const __nv_bfloat16*, int64_t, cudaStream_t);
template cudaError_t LaunchResidualAdd<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                                      const __nv_bfloat16*, int64_t, cudaStream_t);

LADDER_KERNELS_END
