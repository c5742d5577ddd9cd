// Few-token linear layer with fp32 or bf16 weights: y [N,OC] = x [N,C] @ W^T
// + bias for N <= kSmallBatch (matmul_kernels.h).
//
// Why its own kernel: decoding one token multiplies it by every weight once,
// 2 FLOPs per weight read, so the step is bound by how fast the weights
// stream from memory, not by arithmetic. A BLAS GEMV (or an sgemm with M = 1)
// gets there only as well as its kernel set for this CPU allows; this one
// streams each row of W once per call and keeps the few tokens in L1.
// bf16 weights move half of fp32's bytes: they are widened to f32 in
// registers (a 16-bit shift, exact) and multiplied with f32 activations,
// which leaves the activations unrounded. (AVX-512 BF16's VDPBF16PS would
// round the activations to bf16 too; widening costs nothing when memory is
// the bound, so the kernel does not use it.)
//
// What is computed is written once, in matmul_kernels.h; the portable loops
// below are that definition and the reference for the SIMD tiles. For one
// token a tile is one row of W: per 64 channels it loads the row's 64
// weights and the token's 64 activations and does 64 fmas into
// accumulators holding the 64 lanes of step 1 (eight ymm registers on
// AVX2, four zmm on AVX-512). Why 64 lanes and not 16: a memory-bound loop
// streams only as fast as it keeps loads in flight, and eight independent
// accumulators let the core run eight fma chains at once (measured on a
// 2-core Zen 3: 0.82 of a read's bandwidth with two chains, 0.90 with eight).
// For several tokens a tile is R rows by T tokens, a stripe of 16 lanes at
// a time (StripedAvx2). Every tile folds the lanes in the same tree, so
// AVX2 and AVX-512 agree with the portable loops bit for bit.

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/matmul_kernels.h"

namespace ladder::cpu {
namespace {

template <class W>
struct Operands {
  const float* x;  // [N, C]
  const W* w;      // [OC, C]
  const float* b;  // [OC] or null
  float* y;        // [N, OC]
  int64_t N, C, OC;
};

constexpr int kLanes = 64;

// Step 3 of the definition: the channels past the last multiple of 64, then
// the bias.
template <class W>
inline float Finish(const Operands<W>& m, float s, int64_t o, int64_t n) {
  const W* w = m.w + o * m.C;
  const float* x = m.x + n * m.C;
  for (int64_t c = m.C / kLanes * kLanes; c < m.C; ++c) s = std::fma(Widen(w[c]), x[c], s);
  return s + (m.b ? m.b[o] : 0.0f);
}

// A stripe of 16 lanes reads one 16-channel piece of every 64: a cache line
// in four for fp32. The first stripe asks for the rest of each 64-channel
// chunk too, so the rows stream from memory in order and the later stripes
// find them in cache.
template <class W>
inline void TouchChunk(const W* w, int R, int64_t C, int64_t c) {
  for (int r = 0; r < R; ++r) {
    for (int64_t k = 16; k < kLanes; k += 64 / int64_t{sizeof(W)}) {
      __builtin_prefetch(w + r * C + c + k);
    }
  }
}

// The one-token kernels read W in order. For bf16 they ask for the bytes
// kStreamPrefetchBytes (1.5 KiB) ahead of the 64 weights they are about to
// use: measured on a Zen 3, decode went from 0.76-0.88 of the
// read bound to 0.83-0.97, while for fp32 it only got in the way of the
// hardware prefetcher (0.73-0.91 without, 0.73-0.87 with, at 0.75 to 6 KiB).
template <class W>
inline void PrefetchAhead(const W* w) {
  if constexpr (sizeof(W) == 2) {
    const char* p = reinterpret_cast<const char*>(w) + kStreamPrefetchBytes;
    for (int64_t b = 0; b < kLanes * int64_t{sizeof(W)}; b += 64) __builtin_prefetch(p + b);
  }
}

// A tile: rows [o, o + R) by tokens [n, n + T) (R and T fixed by the kernel).
template <class W>
using TileFn = void (*)(const Operands<W>& m, int64_t o, int64_t n);
// One token through rows [o0, o1).
template <class W>
using StreamFn = void (*)(const Operands<W>& m, int64_t o0, int64_t o1);

// ---- portable: the definition, one row by one token ---------------------------

template <class W>
void TilePortable(const Operands<W>& m, int64_t o, int64_t n) {  // one row, one token
  const W* w = m.w + o * m.C;
  const float* x = m.x + n * m.C;
  float lanes[kLanes] = {};
  for (int64_t c = 0; c + kLanes <= m.C; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] = std::fma(Widen(w[c + l]), x[c + l], lanes[l]);
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  m.y[n * m.OC + o] = Finish(m, lanes[0], o, n);
}

// ---- AVX2 -------------------------------------------------------------------------

LADDER_TARGET_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
LADDER_TARGET_AVX2 inline __m256 Load8(const bf16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Step 2 on 64 lanes held as acc[i] = lanes 8 i .. 8 i + 7: lanes l + 32,
// + 16, + 8 (registers i + 4, + 2, + 1), then SumAvx2's tree.
LADDER_TARGET_AVX2 inline float FoldAvx2(__m256* acc) {
  for (int width = 4; width > 0; width /= 2) {
    for (int i = 0; i < width; ++i) acc[i] = _mm256_add_ps(acc[i], acc[i + width]);
  }
  return SumAvx2(acc[0]);
}

// One token (decoding): rows [o0, o1) one after another, each row's 64
// lanes in eight ymm accumulators, eight independent fma chains.
template <class W>
LADDER_TARGET_AVX2 void StreamAvx2(const Operands<W>& m, int64_t o0, int64_t o1) {
  const float* x = m.x;
  for (int64_t o = o0; o < o1; ++o) {
    const W* w = m.w + o * m.C;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t c = 0; c + kLanes <= m.C; c += kLanes) {
      PrefetchAhead(w + c);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        acc[i] = _mm256_fmadd_ps(Load8(w + c + 8 * i), _mm256_loadu_ps(x + c + 8 * i), acc[i]);
      }
    }
    m.y[o] = Finish(m, FoldAvx2(acc), o, 0);
  }
}

// Several tokens: R rows x T tokens share their loads (each weight used T
// times, each activation R times), which 64 lanes per pair would not leave
// registers for. So the lanes go a stripe of 16 at a time (lanes
// [g, g + 16) take the channels 64 k + g .. 64 k + g + 15), two ymm
// registers per pair, and each stripe's sums are stored until the fold.
// Each lane still sums its own channels in order: the same sequence.
template <class W, int R, int T>
LADDER_TARGET_AVX2 void StripedAvx2(const Operands<W>& m, int64_t o, int64_t n) {
  const W* w = m.w + o * m.C;
  const float* x = m.x + n * m.C;
  const int64_t end = m.C / kLanes * kLanes;
  float lanes[R][T][kLanes];
  for (int64_t g = 0; g < kLanes; g += 16) {
    __m256 acc[R][T][2];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
    }
    for (int64_t c = g; c < end; c += kLanes) {
      if (g == 0) TouchChunk(w, R, m.C, c);
      for (int r = 0; r < R; ++r) {
        const __m256 w0 = Load8(w + r * m.C + c), w1 = Load8(w + r * m.C + c + 8);
        for (int t = 0; t < T; ++t) {
          acc[r][t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * m.C + c), acc[r][t][0]);
          acc[r][t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * m.C + c + 8), acc[r][t][1]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        _mm256_storeu_ps(&lanes[r][t][g], acc[r][t][0]);
        _mm256_storeu_ps(&lanes[r][t][g + 8], acc[r][t][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      __m256 acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = _mm256_loadu_ps(&lanes[r][t][8 * i]);
      m.y[(n + t) * m.OC + o + r] = Finish(m, FoldAvx2(acc), o + r, n + t);
    }
  }
}

// ---- AVX-512: as AVX2, with 16 lanes per register ---------------------------------

LADDER_AVX512_BEGIN

LADDER_TARGET_AVX512 inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
LADDER_TARGET_AVX512 inline __m512 Load16(const bf16* p) {
  const __m512i wide =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// Step 2 on 64 lanes held as acc[i] = lanes 16 i .. 16 i + 15: lanes l + 32,
// + 16 (registers i + 2, + 1), then SumAvx512's tree.
LADDER_TARGET_AVX512 inline float FoldAvx512(__m512* acc) {
  for (int width = 2; width > 0; width /= 2) {
    for (int i = 0; i < width; ++i) acc[i] = _mm512_add_ps(acc[i], acc[i + width]);
  }
  return SumAvx512(acc[0]);
}

template <class W>
LADDER_TARGET_AVX512 void StreamAvx512(const Operands<W>& m, int64_t o0, int64_t o1) {
  const float* x = m.x;
  for (int64_t o = o0; o < o1; ++o) {
    const W* w = m.w + o * m.C;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c + kLanes <= m.C; c += kLanes) {
      PrefetchAhead(w + c);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        acc[i] = _mm512_fmadd_ps(Load16(w + c + 16 * i), _mm512_loadu_ps(x + c + 16 * i), acc[i]);
      }
    }
    m.y[o] = Finish(m, FoldAvx512(acc), o, 0);
  }
}

template <class W, int R, int T>
LADDER_TARGET_AVX512 void StripedAvx512(const Operands<W>& m, int64_t o, int64_t n) {
  const W* w = m.w + o * m.C;
  const float* x = m.x + n * m.C;
  const int64_t end = m.C / kLanes * kLanes;
  float lanes[R][T][kLanes];
  for (int64_t g = 0; g < kLanes; g += 16) {
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    for (int64_t c = g; c < end; c += kLanes) {
      if (g == 0) TouchChunk(w, R, m.C, c);
      for (int r = 0; r < R; ++r) {
        const __m512 wv = Load16(w + r * m.C + c);
        for (int t = 0; t < T; ++t) {
          acc[r][t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * m.C + c), acc[r][t]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) _mm512_storeu_ps(&lanes[r][t][g], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      __m512 acc[4];
      for (int i = 0; i < 4; ++i) acc[i] = _mm512_loadu_ps(&lanes[r][t][16 * i]);
      m.y[(n + t) * m.OC + o + r] = Finish(m, FoldAvx512(acc), o + r, n + t);
    }
  }
}

LADDER_AVX512_END

// ---- dispatch --------------------------------------------------------------------

template <class W>
void StreamPortable(const Operands<W>& m, int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) TilePortable(m, o, 0);
}

// A level's kernels: `stream` for one token, and for several full[t - 1]
// covering R rows x t tokens (t = 1..T: the last token tile may be
// partial), one[t - 1] a single row (the rows left over).
template <class W>
struct Kernel {
  StreamFn<W> stream;
  int R, T;
  const TileFn<W>* full;
  const TileFn<W>* one;
};

// Striped tile sizes: R x T accumulator pairs (AVX2) or registers (AVX-512)
// plus R weight registers within the 16 ymm or 32 zmm; the activations are
// fma memory operands.
constexpr int kAvx2R = 2, kAvx2T = 3, kAvx512R = 4, kAvx512T = 4;

template <class W, int R, size_t... I>
constexpr std::array<TileFn<W>, sizeof...(I)> Avx2Tiles(std::index_sequence<I...>) {
  return {&StripedAvx2<W, R, static_cast<int>(I) + 1>...};
}
template <class W, int R, size_t... I>
constexpr std::array<TileFn<W>, sizeof...(I)> Avx512Tiles(std::index_sequence<I...>) {
  return {&StripedAvx512<W, R, static_cast<int>(I) + 1>...};
}

template <class W>
Kernel<W> KernelFor(CpuIsa isa) {
  static constexpr std::array<TileFn<W>, 1> kPortable = {&TilePortable<W>};
  static constexpr auto kAvx2Full = Avx2Tiles<W, kAvx2R>(std::make_index_sequence<kAvx2T>());
  static constexpr auto kAvx2One = Avx2Tiles<W, 1>(std::make_index_sequence<kAvx2T>());
  static constexpr auto kAvx512Full =
      Avx512Tiles<W, kAvx512R>(std::make_index_sequence<kAvx512T>());
  static constexpr auto kAvx512One = Avx512Tiles<W, 1>(std::make_index_sequence<kAvx512T>());
  switch (isa) {
    case CpuIsa::kAvx512:
      return {&StreamAvx512<W>, kAvx512R, kAvx512T, kAvx512Full.data(), kAvx512One.data()};
    case CpuIsa::kAvx2:
      return {&StreamAvx2<W>, kAvx2R, kAvx2T, kAvx2Full.data(), kAvx2One.data()};
    case CpuIsa::kPortable:
      break;
  }
  return {&StreamPortable<W>, 1, 1, kPortable.data(), kPortable.data()};
}

// Rows go to threads in runs of 16 or more (so no two threads write one
// cache line of y): a long sequential read is what memory serves fastest,
// and fine dynamic chunks measured slower.
template <class W>
void Run(const Operands<W>& m) {
  const Kernel<W> k = KernelFor<W>(ActiveCpuIsa());
  if (m.N == 1) {
    // Blocks of 16 rows in guided chunks: each thread starts with a long
    // contiguous run, and the shrinking chunks at the end let a thread that
    // another process slowed finish while the other takes its share.
    const int64_t blocks = (m.OC + 15) / 16;
#pragma omp parallel for schedule(guided) if (m.OC * m.C >= kParallelMin)
    for (int64_t b = 0; b < blocks; ++b) k.stream(m, 16 * b, std::min(m.OC, 16 * b + 16));
    return;
  }
#pragma omp parallel if (m.N * m.OC * m.C >= kParallelMin)
  {
    const Range rows = ThreadRange(m.OC, 16, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t o = rows.begin; o < rows.end; o += k.R) {
      const int64_t R = std::min<int64_t>(k.R, rows.end - o);
      for (int64_t n = 0; n < m.N; n += k.T) {
        const int64_t t = std::min<int64_t>(k.T, m.N - n);
        if (R == k.R) {
          k.full[t - 1](m, o, n);
        } else {
          for (int64_t r = o; r < o + R; ++r) k.one[t - 1](m, r, n);
        }
      }
    }
  }
}

}  // namespace

void SmallMatmul(const float* x, int64_t N, int64_t C, const float* w, int64_t OC,
                 const float* bias, float* y) {
  Run(Operands<float>{x, w, bias, y, N, C, OC});
}

void SmallMatmul(const float* x, int64_t N, int64_t C, const bf16* w, int64_t OC, const float* bias,
                 float* y) {
  Run(Operands<bf16>{x, w, bias, y, N, C, OC});
}

}  // namespace ladder::cpu
