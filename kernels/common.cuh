// Device helpers shared by the kernels: warp reductions, vectorized loads and
// stores, element-type conversions. Only kernel files (.cu) include it, for
// nvcc and for the simulator (kernels/launch.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

// Sum of v over the 32 lanes of a warp, returned to every lane. A butterfly
// (xor) exchange: the order of the adds is fixed by the lane numbers, so the
// result is bitwise the same on every run, and all lanes get the same bits.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// Max of v over the 32 lanes of a warp (fmaxf: a NaN lane is ignored),
// returned to every lane.
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// min of two ints (CUDA's integer min() is not in the simulator's subset).
__device__ __forceinline__ int MinInt(int a, int b) { return a < b ? a : b; }

// kVec elements moved as one memory transaction. With kVec * sizeof(T) == 16
// a warp reads 512 contiguous bytes in one instruction (LDG.128) instead of
// four; with kVec == 1 this is a plain scalar access. The caller guarantees
// the alignment (see the launchers' choice of kVec).
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

template <int kVec, typename T>
__device__ __forceinline__ Vec<T, kVec> LoadVec(const T* p) {
  return *reinterpret_cast<const Vec<T, kVec>*>(p);
}

template <int kVec, typename T>
__device__ __forceinline__ void StoreVec(T* p, const Vec<T, kVec>& x) {
  *reinterpret_cast<Vec<T, kVec>*>(p) = x;
}

// kVec floats moved in pieces of at most 16 bytes (4 floats). An fp32
// accumulator beside a vector of 8 bf16 is 32 bytes, but rows and dynamic
// shared memory are only 16-byte aligned, and no single access moves more
// than 16 bytes anyway.
template <int kVec>
inline constexpr int kFloatPiece = kVec < 4 ? kVec : 4;

template <int kVec>
__device__ __forceinline__ Vec<float, kVec> LoadFloats(const float* p) {
  constexpr int kPiece = kFloatPiece<kVec>;
  Vec<float, kVec> x;
#pragma unroll
  for (int k = 0; k < kVec; k += kPiece) {
    const Vec<float, kPiece> piece = LoadVec<kPiece>(p + k);
#pragma unroll
    for (int j = 0; j < kPiece; ++j) x.v[k + j] = piece.v[j];
  }
  return x;
}

template <int kVec>
__device__ __forceinline__ void StoreFloats(float* p, const Vec<float, kVec>& x) {
  constexpr int kPiece = kFloatPiece<kVec>;
#pragma unroll
  for (int k = 0; k < kVec; k += kPiece) {
    Vec<float, kPiece> piece;
#pragma unroll
    for (int j = 0; j < kPiece; ++j) piece.v[j] = x.v[k + j];
    StoreVec<kPiece>(p + k, piece);
  }
}

// True iff p is aligned for 16-byte vector accesses.
inline bool Aligned16(const void* p) { return reinterpret_cast<size_t>(p) % 16 == 0; }

// Storage type <-> fp32 compute type. Kernels compute in fp32 whatever they
// store (backend.h "Precision"): a bf16 element is widened exactly on load
// and a result rounded once, to nearest even, on store.
__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Elements of T per 16-byte vector access: 4 floats or 8 bf16.
template <typename T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

LADDER_KERNELS_END
