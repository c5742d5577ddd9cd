// int8-weight linear layer for decoding: out [N,OC] = inp [N,C] @ dequant(W)^T
// + bias, with W stored as int8 in groups of G input channels, one f32 scale
// per group (backend.h "int8 weights", quantize.h for the format).
//
// Why: decoding one token reads every weight once and does two FLOPs per
// weight, so batch-1 decode is bound by memory bandwidth, not by FLOPs. int8
// weights move a quarter of fp32's bytes; the activations stay f32 (W8A32),
// so the only error is the weights' rounding. Per group the dot product is
//   sum_c x[c] * q[o,c] * s[o,g] = s[o,g] * sum_{c in g} x[c] * q[o,c],
// one multiply by the scale per group of 32 or more values.
//
// The portable path is the reference: plain loops, parallel over output
// channels. The SIMD paths (AVX2, AVX-512; cpu_isa.h picks one per call)
// widen 8 or 16 int8 weights at a time to f32 (cvtepi8_epi32 + cvtepi32_ps),
// multiply them by their group's scale, and FMA them into one accumulator
// register per (output channel, token), lane j summing channels j, j+W, ...;
// the lanes are added once at the end. They work on tiles of R output
// channels x T tokens: each weight vector is loaded and converted once and
// used by T tokens, each activation vector by R channels, so a batch of T
// tokens costs little more than one token while the weights stream from
// memory. Every output element is computed by the same sequence of
// operations whatever the tile, batch or thread count it lands in, so the
// result depends only on the ISA level.
#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/cpu_isa.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "MatmulInt8Forward";
constexpr char kRows[] = "DequantizeRows";

// q [OC, C] i8 and scales [OC, C / G] f32 with G a multiple of 32 dividing C.
absl::Status CheckQuantized(absl::string_view op, const Tensor& q, const Tensor& scales,
                            int64_t* OC, int64_t* C, int64_t* G) {
  RETURN_IF_ERROR(cpu::RowView(op, "q", q, DType::kI8, OC, C));
  int64_t rows = 0, groups = 0;
  RETURN_IF_ERROR(cpu::RowView(op, "scales", scales, DType::kF32, &rows, &groups));
  if (q.rank != 2 || rows != *OC || groups <= 0 || *C % groups != 0 || (*C / groups) % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": scales ", scales.ShapeString(), " do not split q ", q.ShapeString(),
                     " into groups of a multiple of 32 input channels"));
  }
  *G = *C / groups;
  return absl::OkStatus();
}

// The operands of one call, shared by every tile.
struct Int8Gemm {
  const int8_t* q;  // [OC, C]
  const float* s;   // [OC, groups]
  const float* x;   // [N, C]
  float* y;         // [N, OC]
  const float* b;   // [OC] or null
  int64_t N, C, OC, G, groups;
};

// Computes y[n .. n+T, o .. o+R] (R, T fixed by the kernel).
using TileFn = void (*)(const Int8Gemm& m, int64_t o, int64_t n);

// ---- portable: the reference loops, one (channel, token) per tile ----------

void TilePortable(const Int8Gemm& m, int64_t o, int64_t n) {
  const int8_t* w = m.q + o * m.C;
  const float* s = m.s + o * m.groups;
  const float* x = m.x + n * m.C;
  float acc = 0.0f;
  for (int64_t g = 0; g < m.groups; ++g) {
    float dot = 0.0f;
    for (int64_t c = g * m.G; c < (g + 1) * m.G; ++c) dot += x[c] * static_cast<float>(w[c]);
    acc += s[g] * dot;
  }
  m.y[n * m.OC + o] = acc + (m.b ? m.b[o] : 0.0f);
}

// ---- AVX2: 8 lanes ---------------------------------------------------------

template <int R, int T>
LADDER_TARGET_AVX2 void TileAvx2(const Int8Gemm& m, int64_t o, int64_t n) {
  const int8_t* w = m.q + o * m.C;
  const float* x = m.x + n * m.C;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < m.groups; ++g) {
    __m256 scale[R];
    for (int r = 0; r < R; ++r) scale[r] = _mm256_set1_ps(m.s[(o + r) * m.groups + g]);
    for (int64_t c = g * m.G; c < (g + 1) * m.G; c += 8) {
      __m256 wf[R];
      for (int r = 0; r < R; ++r) wf[r] = _mm256_mul_ps(WidenAvx2(w + r * m.C + c), scale[r]);
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(x + t * m.C + c);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(xv, wf[r], acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      m.y[(n + t) * m.OC + o + r] = SumAvx2(acc[r][t]) + (m.b ? m.b[o + r] : 0.0f);
    }
  }
}

// ---- AVX-512: 16 lanes -----------------------------------------------------

LADDER_AVX512_BEGIN

template <int R, int T>
LADDER_TARGET_AVX512 void TileAvx512(const Int8Gemm& m, int64_t o, int64_t n) {
  const int8_t* w = m.q + o * m.C;
  const float* x = m.x + n * m.C;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < m.groups; ++g) {
    __m512 scale[R];
    for (int r = 0; r < R; ++r) scale[r] = _mm512_set1_ps(m.s[(o + r) * m.groups + g]);
    for (int64_t c = g * m.G; c < (g + 1) * m.G; c += 16) {
      __m512 wf[R];
      for (int r = 0; r < R; ++r) wf[r] = _mm512_mul_ps(WidenAvx512(w + r * m.C + c), scale[r]);
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_loadu_ps(x + t * m.C + c);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(xv, wf[r], acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      m.y[(n + t) * m.OC + o + r] = SumAvx512(acc[r][t]) + (m.b ? m.b[o + r] : 0.0f);
    }
  }
}

LADDER_AVX512_END

// ---- dispatch ----------------------------------------------------------------

// A level's tiles: full[t - 1] covers R channels x t tokens (t = 1..T, the
// last, partial token tile included) and one[t - 1] one channel x t tokens
// (for the OC % R channels left at the end).
struct Kernel {
  int R, T;
  const TileFn* full;
  const TileFn* one;
};

template <int R, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> Avx2Tiles(std::index_sequence<I...>) {
  return {&TileAvx2<R, static_cast<int>(I) + 1>...};
}
template <int R, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> Avx512Tiles(std::index_sequence<I...>) {
  return {&TileAvx512<R, static_cast<int>(I) + 1>...};
}

// Tile sizes: R x T accumulators plus R converted weights must fit in the
// register file (16 ymm for AVX2, 32 zmm for AVX-512).
constexpr int kAvx2R = 2, kAvx2T = 4, kAvx512R = 2, kAvx512T = 8;
constexpr std::array<TileFn, 1> kPortableTiles = {&TilePortable};
constexpr auto kAvx2Full = Avx2Tiles<kAvx2R>(std::make_index_sequence<kAvx2T>());
constexpr auto kAvx2One = Avx2Tiles<1>(std::make_index_sequence<kAvx2T>());
constexpr auto kAvx512Full = Avx512Tiles<kAvx512R>(std::make_index_sequence<kAvx512T>());
constexpr auto kAvx512One = Avx512Tiles<1>(std::make_index_sequence<kAvx512T>());

Kernel KernelFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return {kAvx512R, kAvx512T, kAvx512Full.data(), kAvx512One.data()};
    case CpuIsa::kAvx2:
      return {kAvx2R, kAvx2T, kAvx2Full.data(), kAvx2One.data()};
    case CpuIsa::kPortable:
      break;
  }
  return {1, 1, kPortableTiles.data(), kPortableTiles.data()};
}

// Threads split the channel blocks statically, so each streams one contiguous
// slice of the weights, once; within a block the token tiles reuse the block's
// rows from L1.
void RunTiles(const Int8Gemm& m, const Kernel& k) {
  const int64_t blocks = (m.OC + k.R - 1) / k.R;
#pragma omp parallel for schedule(static) if (m.N * m.OC * m.C >= cpu::kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o0 = b * k.R, o1 = std::min(o0 + k.R, m.OC);
    for (int64_t n = 0; n < m.N; n += k.T) {
      const int64_t t = std::min<int64_t>(k.T, m.N - n);
      if (o1 - o0 == k.R) {
        k.full[t - 1](m, o0, n);
      } else {
        for (int64_t o = o0; o < o1; ++o) k.one[t - 1](m, o, n);
      }
    }
  }
}

}  // namespace

absl::Status CpuBackend::MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales,
                                           Tensor bias) {
  int64_t OC = 0, C = 0, G = 0, N = 0, Cin = 0;
  RETURN_IF_ERROR(CheckQuantized(kFwd, q, scales, &OC, &C, &G));
  RETURN_IF_ERROR(cpu::RowView(kFwd, "inp", inp, DType::kF32, &N, &Cin));
  if (Cin != C) {
    return absl::InvalidArgumentError(absl::StrCat(kFwd, ": inp has ", Cin, " columns, q has ", C));
  }
  RETURN_IF_ERROR(cpu::CheckRows(kFwd, "out", out, DType::kF32, N, OC));
  if (!bias.empty()) RETURN_IF_ERROR(cpu::CheckNumel(kFwd, "bias", bias, DType::kF32, OC));
  const Int8Gemm m{
      q.i8(), scales.f32(), inp.f32(), out.f32(), bias.empty() ? nullptr : bias.f32(), N,
      C,      OC,           G,         C / G};
  RunTiles(m, KernelFor(ActiveCpuIsa()));
  return absl::OkStatus();
}

absl::Status CpuBackend::DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows) {
  int64_t OC = 0, C = 0, G = 0, N = 0, Cout = 0;
  RETURN_IF_ERROR(CheckQuantized(kRows, q, scales, &OC, &C, &G));
  RETURN_IF_ERROR(cpu::RowView(kRows, "out", out, DType::kF32, &N, &Cout));
  if (Cout != C) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRows, ": out has ", Cout, " columns, q has ", C));
  }
  RETURN_IF_ERROR(cpu::CheckNumel(kRows, "rows", rows, DType::kI32, N));
  for (int64_t n = 0; n < N; ++n) {
    const int32_t r = rows.i32()[n];
    if (r < 0 || r >= OC) {
      return absl::InvalidArgumentError(
          absl::StrCat(kRows, ": row ", r, " of entry ", n, " outside [0, ", OC, ")"));
    }
    const int8_t* w = q.i8() + r * C;
    const float* s = scales.f32() + r * (C / G);
    float* y = out.f32() + n * C;
    // Group by group, so the inner loop is a plain widen-and-scale the
    // compiler vectorizes (one row per token: not worth more).
    for (int64_t g = 0; g < C / G; ++g) {
      for (int64_t c = g * G; c < (g + 1) * G; ++c) y[c] = static_cast<float>(w[c]) * s[g];
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
