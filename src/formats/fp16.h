// IEEE 754 binary16 ("half", fp16): 1 sign bit, 5 exponent bits (bias 15),
// 10 mantissa bits. Largest finite value 65504, smallest normal 2^-14,
// smallest subnormal 2^-24. GGUF stores F16 tensors and the scale of every
// Q8_0 block in this format (ggml_half in llama.cpp's ggml-common.h).
//
// Widening is exact (every half is a float). Narrowing rounds to nearest,
// ties to even, in one step (no double rounding through an intermediate):
// values at or above 65520 in magnitude become infinity, values below 2^-14
// become subnormals (2^-25 and less become a signed zero), and NaN stays a
// quiet NaN of the same sign (0x7e00 | sign, as ggml's reference converter
// gives). The sign of zero is kept. bf16.h is the bfloat16 counterpart.
#pragma once

#include <bit>
#include <cstdint>

namespace ladder {

using fp16 = uint16_t;  // the raw bits; arithmetic happens in float

inline float Fp16ToFloat(fp16 h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);  // +-0
  // Subnormal mant * 2^-24: shift the leading 1 up to the implicit bit.
  uint32_t e = 113;  // float exponent of 2^-14, decremented per shift
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

inline fp16 FloatToFp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<fp16>(sign | 0x7e00u);  // NaN
  // 65520 (0x477ff000) is halfway between 65504 and 2^16; the tie goes to
  // the even neighbour, 2^16, which is out of range: infinity.
  if (a >= 0x477ff000u) return static_cast<fp16>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // a half normal: rebias the exponent by 127 - 15
    const uint32_t m = a - 0x38000000u;
    // Drop 13 mantissa bits rounding to nearest even; a carry out of the
    // mantissa bumps the exponent, which is the right answer.
    return static_cast<fp16>(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  // A half subnormal (or zero): round(|f| * 2^24) to nearest even. |f| is
  // mant * 2^(e - 150) with the implicit bit; the result is mant >> shift.
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<fp16>(sign);  // below 2^-25: rounds to zero
  const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14 .. 24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // 1024 is 2^-14, a normal: right
  return static_cast<fp16>(sign | q);
}

}  // namespace ladder
