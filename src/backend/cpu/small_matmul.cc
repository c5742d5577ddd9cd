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
// below are that definition and the reference for the SIMD tiles, which are
// one source for AVX2 and AVX-512 (small_matmul-inl.h, simd.h). For one
// token a tile is one row of W: per 64 channels it loads the row's 64
// weights and the token's 64 activations and does 64 fmas into
// accumulators holding the 64 lanes of step 1 (eight ymm registers on
// AVX2, four zmm on AVX-512). Why 64 lanes and not 16: a memory-bound loop
// streams only as fast as it keeps loads in flight, and eight independent
// accumulators let the core run eight fma chains at once (measured on a
// 2-core Zen 3: 0.82 of a read's bandwidth with two chains, 0.90 with eight).
// For several tokens a tile is R rows by T tokens, a stripe of 16 lanes at
// a time (Striped). Every tile folds the lanes in the same tree, so
// AVX2 and AVX-512 agree with the portable loops bit for bit.

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/matmul_kernels.h"
#include "src/backend/cpu/simd.h"

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

// The SIMD levels' Stream and Striped tiles: one source, small_matmul-inl.h.
#define LADDER_SIMD_KERNELS "src/backend/cpu/small_matmul-inl.h"
#include "src/backend/cpu/foreach_simd_level.h"

// Striped tile sizes: R x T accumulators of 16 lanes (two ymm or one zmm
// each) plus R weight stripes within the 16 ymm or 32 zmm registers; the
// activations are fma memory operands.
constexpr int kAvx2R = 2, kAvx2T = 3, kAvx512R = 4, kAvx512T = 4;

template <class W>
Kernel<W> KernelFor(CpuIsa isa) {
  static constexpr std::array<TileFn<W>, 1> kPortable = {&TilePortable<W>};
  switch (isa) {
    case CpuIsa::kAvx512:
      return avx512::Kernels<W, kAvx512R, kAvx512T>();
    case CpuIsa::kAvx2:
      return avx2::Kernels<W, kAvx2R, kAvx2T>();
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
