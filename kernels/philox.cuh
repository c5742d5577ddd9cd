// Counter-based random numbers on the device: Philox4x32-10, bit for bit the
// host's (src/core/philox.{h,cc}, where the algorithm and the streams are
// described), and stochastic rounding to bf16 built on it (src/core/bf16.h
// FloatToBf16Stochastic). A thread computes the word it needs from (seed,
// stream, index) alone, so nothing is stored between launches and any
// element can be recomputed: a resumed run rounds exactly as the original.
// tests/gpu/optimizer_test.cc holds both against the host's definitions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// Word `index` of the stream (seed, stream): word index % 4 of the Philox
// block at counter (index / 4, stream) under key seed (src/core/philox.h
// PhiloxWord).
__device__ __forceinline__ uint32_t PhiloxWord(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index / 4;
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32);
  uint32_t c2 = static_cast<uint32_t>(stream), c3 = static_cast<uint32_t>(stream >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  switch (index % 4) {
    case 0:
      return c0;
    case 1:
      return c1;
    case 2:
      return c2;
    default:
      return c3;
  }
}

// The stream of stochastic rounding at an optimizer step (src/core/philox.h
// kRoundingStream + step).
inline constexpr uint64_t kRoundingStream = uint64_t{4} << 48;

// x rounded to bf16 with the low 16 bits of `random` added to the 16 bits
// narrowing drops (a carry rounds up): src/core/bf16.h FloatToBf16Stochastic.
__device__ __forceinline__ __nv_bfloat16 StochasticRoundBf16(float x, uint32_t random) {
  const uint32_t u = __float_as_uint(x);
  uint32_t r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r = (u >> 16) | 0x40u;  // NaN stays a quiet NaN
  } else if ((u & 0x7fffffffu) == 0x7f800000u) {
    r = u >> 16;  // infinities stay
  } else {
    r = (u + (random & 0xffffu)) >> 16;
  }
  return __ushort_as_bfloat16(static_cast<unsigned short>(r));
}

LADDER_KERNELS_END
