// The CUDA simulator's device side: what kernel code may use. Every thread of
// a block is a fiber (fiber.h); a thread runs until it reaches __syncthreads,
// a warp collective or its end, then the next thread runs. When every thread
// of the block is waiting, the scheduler (scheduler.cc) releases what can be
// released, in a fixed order, so a simulated run is deterministic.
//
// The subset, and what is checked beyond a GPU's behaviour:
//  - threadIdx, blockIdx, blockDim, gridDim (uint3/dim3), warpSize (32).
//  - __syncthreads(): every thread of the block must reach it. If one has
//    exited, or waits at a warp collective the others can never complete, the
//    launch fails (cudaErrorIllegalInstruction) naming the block and thread.
//  - __shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync (any
//    trivially copyable value of at most 8 bytes, width a power of two <= 32),
//    __ballot_sync, __any_sync, __all_sync, __syncwarp. The mask must name
//    exactly the lanes that take part: every lane in it must arrive at the
//    same collective with the same mask (one that exited, or waits elsewhere,
//    fails the launch: on a GPU that is undefined behaviour or a hang), the
//    calling lane must be in its own mask, and a shuffle may read only lanes
//    of the mask.
//  - atomics (atomicAdd, atomicSub, atomicMax, atomicMin, atomicExch,
//    atomicCAS, atomicOr, atomicAnd): trivially atomic, threads never run at
//    the same time; __threadfence() is a no-op for the same reason.
//  - math: <cmath>'s float functions plus the intrinsics kernels use
//    (__expf, __logf, __fdividef, rsqrtf, __saturatef, __float2int_rn, ...),
//    computed with the host's IEEE arithmetic (a GPU's fast intrinsics differ
//    in the last bits: tests compare against tolerances, not bits).
//  - __trap() and a failed assert(): the launch fails with cudaErrorAssert.
//  - vector types float2, float4, int2, int4, uint2, uint4 and make_*().
//  - tensor-core instructions, through kernels/tensor_core.cuh only (their
//    simulated twins are in tensor_core.h, which details the checks):
//    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 and
//    ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16 are warp
//    collectives of all 32 lanes (a missing lane or a different variant fails
//    like a partial-mask shuffle; fragments follow the PTX layouts; the mma
//    sums in fp32 in k order, so a GPU may differ in the last bits);
//    ldmatrix row addresses must be 16-byte aligned and inside the block's
//    shared memory. cp.async.cg.shared.global (16 bytes), commit_group and
//    wait_group N: the destination is poisoned at issue and the copy happens
//    at the wait that covers its group, so a read before the wait sees NaN.
// Static __shared__ arrays are deliberately not defined: kernels use dynamic
// shared memory (kernels/launch.cuh DynamicShared), which is poisoned.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "src/backend/cuda_sim/runtime.h"

// CUDA's function qualifiers mean nothing on the host.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)

namespace ladder {
namespace cuda_sim {

inline constexpr int warpSize = 32;

// The running thread's indices, set by the scheduler before it resumes a
// fiber (plain variables: reading them costs what reading a register costs).
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};

namespace internal {

// kMma and kLdMatrix are the tensor-core instructions (tensor_core.h): always
// the full warp, their operands passed by pointer (WarpMatrix).
enum class WarpOp : uint8_t {
  kShfl,
  kShflUp,
  kShflDown,
  kShflXor,
  kBallot,
  kAny,
  kAll,
  kSync,
  kMma,
  kLdMatrix,
};

// Suspends the running thread at __syncthreads until the block is released.
void SyncThreads();
// Suspends the running lane at a warp collective; returns its result (the
// shuffled value's bits, or the vote's mask/bool).
uint64_t WarpCollective(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
// Suspends the running lane at a tensor-core collective of the whole warp
// (kMma, kLdMatrix): `in` points to the lane's operands, `out` receives its
// results when all 32 lanes have arrived (tensor_core.h).
void WarpMatrix(WarpOp op, int arg, const void* in, void* out);
// Fails the launch (cudaErrorAssert) with `what`; does not return.
[[noreturn]] void Trap(const char* what);

template <typename T>
uint64_t Bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "warp shuffles move values of at most 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T FromBits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace internal

inline void __syncthreads() { internal::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  internal::WarpCollective(internal::WarpOp::kSync, mask, 0, 0, warpSize);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
[[noreturn]] inline void __trap() { internal::Trap("__trap()"); }

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return internal::FromBits<T>(internal::WarpCollective(internal::WarpOp::kShfl, mask,
                                                        internal::Bits(var), src_lane, width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return internal::FromBits<T>(internal::WarpCollective(
      internal::WarpOp::kShflUp, mask, internal::Bits(var), static_cast<int>(delta), width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return internal::FromBits<T>(internal::WarpCollective(
      internal::WarpOp::kShflDown, mask, internal::Bits(var), static_cast<int>(delta), width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return internal::FromBits<T>(internal::WarpCollective(internal::WarpOp::kShflXor, mask,
                                                        internal::Bits(var), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(
      internal::WarpCollective(internal::WarpOp::kBallot, mask, predicate != 0, 0, warpSize));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(
      internal::WarpCollective(internal::WarpOp::kAny, mask, predicate != 0, 0, warpSize));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(
      internal::WarpCollective(internal::WarpOp::kAll, mask, predicate != 0, 0, warpSize));
}

// ---- atomics: threads never run at the same time --------------------------------

namespace internal {
// old = *address; *address = next(old); return old.
template <typename T, typename F>
T AtomicUpdate(T* address, F next) {
  const T old = *address;
  *address = next(old);
  return old;
}
}  // namespace internal

template <typename T>
T atomicAdd(T* address, T val) {
  return internal::AtomicUpdate(address, [val](T old) { return old + val; });
}
template <typename T>
T atomicSub(T* address, T val) {
  return internal::AtomicUpdate(address, [val](T old) { return old - val; });
}
template <typename T>
T atomicMax(T* address, T val) {
  return internal::AtomicUpdate(address, [val](T old) { return old < val ? val : old; });
}
template <typename T>
T atomicMin(T* address, T val) {
  return internal::AtomicUpdate(address, [val](T old) { return val < old ? val : old; });
}
template <typename T>
T atomicExch(T* address, T val) {
  return internal::AtomicUpdate(address, [val](T) { return val; });
}
template <typename T>
T atomicCAS(T* address, T compare, T val) {
  return internal::AtomicUpdate(address, [=](T old) { return old == compare ? val : old; });
}
template <typename T>
T atomicOr(T* address, T val) {
  return internal::AtomicUpdate(address, [val](T old) { return old | val; });
}
template <typename T>
T atomicAnd(T* address, T val) {
  return internal::AtomicUpdate(address, [val](T old) { return old & val; });
}

// ---- math intrinsics ----------------------------------------------------------

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline int __float_as_int(float x) { return internal::FromBits<int>(internal::Bits(x)); }
inline float __int_as_float(int x) { return internal::FromBits<float>(internal::Bits(x)); }
inline unsigned __float_as_uint(float x) { return internal::FromBits<unsigned>(internal::Bits(x)); }
inline float __uint_as_float(unsigned x) { return internal::FromBits<float>(internal::Bits(x)); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}

// ---- vector types -----------------------------------------------------------------

struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

}  // namespace cuda_sim
}  // namespace ladder
