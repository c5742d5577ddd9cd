// Which SIMD instruction set the CPU kernels use, chosen at run time.
//
// The binary is built for plain x86-64 (no global -mavx flags) so it runs on
// any x86-64 CPU. The few kernels that gain from wide vectors (int8 matmul,
// int8 paged attention) carry extra copies compiled with GCC's
// __attribute__((target(...))) and pick one per call from ActiveCpuIsa():
//   avx512: avx512f + bw + vl + vnni (Cascade Lake, Ice Lake, Zen 4 and
//           later), 16 floats or 64 int8 per register, int8 dot products
//   avx2:   avx2 + fma, 8 floats or 32 int8 per register
//   portable: plain loops (the reference the others are tested against)
// LADDER_CPU_ISA=portable|avx2|avx512 caps the level (to compare or debug);
// a level the CPU lacks falls back to the best it has, with one note on stderr.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ladder {

enum class CpuIsa { kPortable, kAvx2, kAvx512 };  // ordered: higher is wider

const char* CpuIsaName(CpuIsa isa);

// The best level this CPU supports (ignores LADDER_CPU_ISA and overrides).
CpuIsa SupportedCpuIsa();

// The level kernels run at: a ScopedCpuIsa's on this thread if one is alive,
// else LADDER_CPU_ISA (capped to what the CPU supports), else the best.
// Ops read it once on the calling thread, before their parallel region.
CpuIsa ActiveCpuIsa();

// Runs this thread's ops at `isa` (capped to SupportedCpuIsa()) while alive,
// so tests can compare every level in one process.
class ScopedCpuIsa {
 public:
  explicit ScopedCpuIsa(CpuIsa isa);
  ~ScopedCpuIsa();
  ScopedCpuIsa(const ScopedCpuIsa&) = delete;
  ScopedCpuIsa& operator=(const ScopedCpuIsa&) = delete;

 private:
  int previous_;  // the override it replaced, -1 for none
};

// ---- SIMD building blocks shared by the kernels ------------------------------
// Each function carries its level's target attribute, so it compiles into
// (and may only be inlined into) functions of that same level.

#define LADDER_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define LADDER_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// 8 int8 at p, widened to f32.
LADDER_TARGET_AVX2 inline __m256 WidenAvx2(const int8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

// The sum of the 8 lanes in a fixed tree: (0+4, 1+5, 2+6, 3+7), then pairs,
// then the last two, so a result never depends on anything but the inputs.
LADDER_TARGET_AVX2 inline float SumAvx2(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// GCC 12's AVX-512 intrinsics seed an unused pass-through operand with a
// self-initialized variable, which -Wuninitialized flags wherever they are
// inlined (GCC bug 105593, fixed in 12.3). Code using them is wrapped in
// LADDER_AVX512_BEGIN / LADDER_AVX512_END.
#define LADDER_AVX512_BEGIN                                                            \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define LADDER_AVX512_END _Pragma("GCC diagnostic pop")

LADDER_AVX512_BEGIN

// 16 int8 at p, widened to f32.
LADDER_TARGET_AVX512 inline __m512 WidenAvx512(const int8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

// The sum of the 16 lanes: (0+8, ..., 7+15), then as SumAvx2 (spelled out
// rather than _mm512_reduce_add_ps so the order is written here).
LADDER_TARGET_AVX512 inline float SumAvx512(__m512 v) {
  const __m512 h = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256 e = _mm512_castps512_ps256(h);
  __m128 f = _mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps(e, 1));
  f = _mm_add_ps(f, _mm_movehl_ps(f, f));
  f = _mm_add_ss(f, _mm_movehdup_ps(f));
  return _mm_cvtss_f32(f);
}

LADDER_AVX512_END

}  // namespace ladder
