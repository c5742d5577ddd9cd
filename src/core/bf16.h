// bfloat16: the top 16 bits of an IEEE float (sign, 8 exponent bits, 7
// mantissa bits). The one definition of the conversions every backend and
// format uses, so a weight rounded on the host is the weight a kernel reads.
//
// bf16 keeps float's range and about 3 significant digits: half the bytes of
// fp32 for the same exponent, which is why weights and activations survive
// the cut where fp16 would overflow. Widening is exact (a shift); narrowing
// rounds to nearest, ties to even, and keeps NaN a (quiet) NaN.
#pragma once

#include <bit>
#include <cstdint>

namespace ladder {

using bf16 = uint16_t;  // the raw bits; arithmetic happens in float

inline float Bf16ToFloat(bf16 b) { return std::bit_cast<float>(uint32_t{b} << 16); }

inline bf16 FloatToBf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40u);  // NaN
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even;
  // a carry out of the mantissa bumps the exponent, which is correct
  // (the largest finite values round to infinity as IEEE says).
  return static_cast<bf16>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Stochastic rounding: x becomes one of its two bf16 neighbours, the upper
// one (in magnitude) with probability (|x| - |lower|) / ulp, decided by the
// low 16 bits of `random`: they are added to the 16 bits that narrowing
// drops, and a carry rounds up. Unbiased on average, so an update much
// smaller than a weight's bf16 ulp still moves it in expectation instead of
// being rounded away every time. NaN stays a quiet NaN and infinities stay
// infinite; a value within one ulp of the largest finite bf16 may round up
// to infinity, as nearest-even rounding does beyond the halfway point.
inline bf16 FloatToBf16Stochastic(float f, uint32_t random) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40u);  // NaN
  if ((u & 0x7fffffffu) == 0x7f800000u) return static_cast<bf16>(u >> 16);           // inf
  return static_cast<bf16>((u + (random & 0xffffu)) >> 16);
}

// Element readers for code templated over a weight's storage (float or bf16).
inline float Widen(float f) { return f; }
inline float Widen(bf16 b) { return Bf16ToFloat(b); }

}  // namespace ladder
