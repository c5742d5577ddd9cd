// One SIMD source for every instruction-set level.
//
// The CPU kernels that need explicit vectors (the few-token matmul, the
// int8 matmul, int8 paged attention) are written once, over a level V:
// V::F holds V::kF floats, V::I as many 32-bit integers (4 V::kF bytes),
// and V's static functions are the few operations the kernels use, each one
// to three instructions of its level. Avx2 and Avx512 below are the levels;
// the portable loops each kernel keeps beside them are its definition, the
// reference every level is tested against, not a third copy.
//
// How the one text becomes a kernel per level. GCC inlines a function built
// for a target (say avx2) only into callers built for at least that target,
// so a template taking V as a parameter, compiled for plain x86-64, could
// not inline V's operations. Instead a kernel's SIMD text lives in its own
// `*-inl.h` (no include guard), and its .cc compiles that text once per
// level, each time inside `#pragma GCC target` for the level and a
// namespace of its own where V names the level (foreach_simd_level.h):
//   namespace avx2   { using V = Avx2;   <text> }   target avx2, fma
//   namespace avx512 { using V = Avx512; <text> }   target avx512f/bw/vl/vnni
// Everything the text defines is then built with its level's instructions
// and V's operations inline into it. The .cc picks avx2::X or avx512::X per
// call from ActiveCpuIsa() (cpu_isa.h). Highway, which gemma.cpp is written
// in, compiles one source for many targets the same way.
//
// The levels' operations are defined to agree: Sum folds the lanes in one
// written tree, the widening loads are exact, MulAdd rounds once. A kernel
// that does the same operations in the same order on either level gets the
// same bits, and the tests hold both to the portable loops bit for bit.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "src/core/bf16.h"

namespace ladder::cpu {

#define LADDER_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define LADDER_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// GCC 12's AVX-512 intrinsics seed an unused pass-through operand with a
// self-initialized variable, which -Wuninitialized flags wherever they are
// inlined (GCC bug 105593, fixed in 12.3). Code using them is wrapped in
// LADDER_AVX512_BEGIN / LADDER_AVX512_END.
#define LADDER_AVX512_BEGIN                                                            \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define LADDER_AVX512_END _Pragma("GCC diagnostic pop")

// The 4 int8 at p (4 input channels of one row or token) as one int32.
inline int32_t FourBytes(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// AVX2 + FMA: 8 floats or 32 bytes per register, 16 registers.
struct Avx2 {
  using F = __m256;
  using I = __m256i;
  static constexpr int kF = 8;

  LADDER_TARGET_AVX2 static F Zero() { return _mm256_setzero_ps(); }
  LADDER_TARGET_AVX2 static F Set(float a) { return _mm256_set1_ps(a); }
  // kF values at p, as floats (bf16 and int8 widen exactly).
  LADDER_TARGET_AVX2 static F Load(const float* p) { return _mm256_loadu_ps(p); }
  LADDER_TARGET_AVX2 static F Load(const bf16* p) {  // a bf16 is a float's top 16 bits
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  LADDER_TARGET_AVX2 static F Load(const int8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
  LADDER_TARGET_AVX2 static void Store(float* p, F v) { _mm256_storeu_ps(p, v); }
  LADDER_TARGET_AVX2 static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  LADDER_TARGET_AVX2 static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  // a * b + c, rounded once.
  LADDER_TARGET_AVX2 static F MulAdd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }

  // The sum of the 8 lanes in a fixed tree: (0+4, 1+5, 2+6, 3+7), then
  // pairs, then the last two, so a result depends on nothing but the inputs.
  LADDER_TARGET_AVX2 static float Sum(F v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }

  // ---- int8 dot products: each 32-bit lane sums 4 byte products ----------
  // A token's 4 activation bytes, broadcast to every lane, and their
  // magnitudes (VPMADDUBSW takes one unsigned operand).
  struct Bytes {
    I x, abs;
  };
  LADDER_TARGET_AVX2 static I ZeroInt() { return _mm256_setzero_si256(); }
  LADDER_TARGET_AVX2 static I LoadWeights(const int8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const I*>(p));
  }
  LADDER_TARGET_AVX2 static Bytes Broadcast(int32_t four) {
    const I x = _mm256_set1_epi32(four);
    return {x, _mm256_sign_epi8(x, x)};
  }
  // acc + sum of the 4 products w * x per lane: |x| times w with x's sign,
  // summed in pairs to 16 bits (at most 2 * 127 * 127, no saturation), then
  // the pairs to 32.
  LADDER_TARGET_AVX2 static I DotBytes(I acc, I w, Bytes x) {
    const I pairs = _mm256_maddubs_epi16(x.abs, _mm256_sign_epi8(w, x.x));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  // A block's summed dots as floats (exact below 2^24); `bias` is unused.
  LADDER_TARGET_AVX2 static F BlockDot(I dot, int32_t /*bias*/) { return _mm256_cvtepi32_ps(dot); }
};

LADDER_AVX512_BEGIN

// AVX-512 F + BW + VL + VNNI: 16 floats or 64 bytes per register, 32
// registers, VPDPBUSD's 64 byte multiply-adds per instruction.
struct Avx512 {
  using F = __m512;
  using I = __m512i;
  static constexpr int kF = 16;

  LADDER_TARGET_AVX512 static F Zero() { return _mm512_setzero_ps(); }
  LADDER_TARGET_AVX512 static F Set(float a) { return _mm512_set1_ps(a); }
  LADDER_TARGET_AVX512 static F Load(const float* p) { return _mm512_loadu_ps(p); }
  LADDER_TARGET_AVX512 static F Load(const bf16* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  LADDER_TARGET_AVX512 static F Load(const int8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
  LADDER_TARGET_AVX512 static void Store(float* p, F v) { _mm512_storeu_ps(p, v); }
  LADDER_TARGET_AVX512 static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  LADDER_TARGET_AVX512 static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  LADDER_TARGET_AVX512 static F MulAdd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }

  // The sum of the 16 lanes: (0+8, ..., 7+15), then Avx2::Sum's tree
  // (spelled out rather than _mm512_reduce_add_ps so the order is written
  // here).
  LADDER_TARGET_AVX512 static float Sum(F v) {
    const __m512 h = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m256 e = _mm512_castps512_ps256(h);
    __m128 f = _mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps(e, 1));
    f = _mm_add_ps(f, _mm_movehl_ps(f, f));
    f = _mm_add_ss(f, _mm_movehdup_ps(f));
    return _mm_cvtss_f32(f);
  }

  // ---- int8 dot products: VPDPBUSD multiplies unsigned by signed bytes ----
  // So the weights are made unsigned, q + 128 (the top bit flipped), which
  // adds 128 * sum(x) to every dot: BlockDot takes that back once per block.
  using Bytes = I;
  LADDER_TARGET_AVX512 static I ZeroInt() { return _mm512_setzero_si512(); }
  LADDER_TARGET_AVX512 static I LoadWeights(const int8_t* p) {
    return _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  LADDER_TARGET_AVX512 static Bytes Broadcast(int32_t four) { return _mm512_set1_epi32(four); }
  LADDER_TARGET_AVX512 static I DotBytes(I acc, I w, Bytes x) {
    return _mm512_dpbusd_epi32(acc, w, x);
  }
  // A block's summed dots less `bias` (128 times the sum of the block's
  // activation bytes), as floats.
  LADDER_TARGET_AVX512 static F BlockDot(I dot, int32_t bias) {
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(dot, _mm512_set1_epi32(bias)));
  }
};

LADDER_AVX512_END

}  // namespace ladder::cpu
