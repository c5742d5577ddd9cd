// int8 linear layer: out [N,OC] = inp [N,C] @ dequant(W)^T + bias, with W
// int8 in groups of G input channels, one f32 scale per group, stored in
// quantize.h's panels of 16 rows (backend.h "int8 weights").
//
// Why int8, and why W8A8: decoding one token reads every weight once and
// does two FLOPs per weight, so batch-1 decode is bound by memory bandwidth;
// int8 weights move a quarter of fp32's bytes. Widening each weight to f32
// to multiply it (W8A32) costs four vector instructions per 16 weights,
// enough to keep one core from streaming at full bandwidth and to make a
// batch of tokens slower than fp32's sgemm. So the activations are
// quantized too, per token in blocks of 32 channels (as llama.cpp's Q8_0 x
// Q8_0 dot), and each block's dot product is integer arithmetic: one AVX-512
// VNNI instruction (VPDPBUSD) does 64 multiply-adds, and the float work is
// one multiply-add per block of 32.
//
// What is computed, by every ISA level, bit for bit:
//   1. Each token's activations, block by block (32 channels), with
//      QuantizeSymmetric: x[n, c] ~= xq[n, c] * xs[n, c / 32].
//   2. For each output (n, o), over the blocks b = 0, 1, ... in order:
//        dot = sum_{c in b} xq[n, c] * q[o, c]        (int32, exact)
//        acc = fma(float(dot), s[o, g(b)] * xs[n, b], acc)
//      and out[n, o] = acc + bias[o].
// |dot| <= 32 * 127 * 127 < 2^24, so float(dot) is exact as well; the float
// steps are the same everywhere, so a result depends on neither the ISA, the
// batch, the tile nor the thread count (decoding is batch-invariant).
//
// The portable path is the reference: those loops, one token by 16 rows at
// a time. The SIMD paths, one source for both levels (int8_matmul-inl.h,
// simd.h), compute a panel (16 output channels, one lane each) for T
// tokens: per 4 input channels they load the panel's 64 weight bytes once
// and, per token, broadcast the token's 4 int8 activations to every lane
// and multiply-add them into that token's 16 lane sums (Avx2::DotBytes,
// Avx512::DotBytes):
//   AVX-512: VPDPBUSD, unsigned x signed bytes. Each weight register is
//            made unsigned, q + 128 (its top bit flipped, shared by the T
//            tokens), and the 128 * sum(xq) that adds to a block's dot is
//            subtracted once per block (QuantizeActivations keeps it).
//   AVX2:    VPMADDUBSW + VPMADDWD on two 32-byte halves, with the sign
//            trick (|x| times q with x's sign) so the 16-bit pair sums,
//            at most 2 * 127 * 127, never saturate.
//
// That is for up to kSmallBatch tokens, where reading the weights is the
// bound (matmul_kernels.h). Prefill is compute-bound: with AVX-512 VNNI the
// integer dots still beat sgemm (64 multiply-adds an instruction against
// 16), so the same kernel runs every N; without, each panel is widened to
// fp32 and sgemm multiplies the unquantized activations by it
// (DequantizePanel, DequantizedSgemm; Int8KernelMaxTokens decides).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/matmul_kernels.h"
#include "src/backend/cpu/simd.h"
#include "src/backend/quantize.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "MatmulInt8Forward";
constexpr char kRows[] = "DequantizeRows";
constexpr int64_t kBlock = 32;  // activation block: input channels per scale
constexpr int64_t kPanel = kInt8PanelRows;

// q [OC, C] i8 (OC a multiple of 16) and scales [OC, C / G] f32 with G a
// multiple of 32 dividing C.
absl::Status CheckQuantized(absl::string_view op, const Tensor& q, const Tensor& scales,
                            int64_t* OC, int64_t* C, int64_t* G) {
  RETURN_IF_ERROR(cpu::RowView(op, "q", q, DType::kI8, OC, C));
  if (q.rank != 2 || *OC % kPanel != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": q ", q.ShapeString(), " is not a matrix of panels of ", kPanel, " rows"));
  }
  int64_t rows = 0, groups = 0;
  RETURN_IF_ERROR(cpu::RowView(op, "scales", scales, DType::kF32, &rows, &groups));
  if (rows != *OC || groups <= 0 || *C % groups != 0 || (*C / groups) % kBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": scales ", scales.ShapeString(), " do not split q ", q.ShapeString(),
                     " into groups of a multiple of 32 input channels"));
  }
  *G = *C / groups;
  return absl::OkStatus();
}

// The operands of one call, shared by every tile.
struct Int8Gemm {
  const int8_t* q;    // [OC, C] panels
  const float* s;     // [OC, groups] panels
  const int8_t* xq;   // [N, C] quantized activations
  const float* xs;    // [N, blocks] their scales
  const int32_t* xc;  // [N, blocks] 128 * the sum of each block's xq (AVX-512)
  float* y;           // [N, OC]
  const float* b;     // [OC] or null
  int64_t N, C, OC, groups, blocks, blocks_per_group;
};

// Step 1: quantizes every token's activations in blocks of 32 into
// (xq, xs), and keeps 128 times each block's sum in xc for the AVX-512
// level's unsigned weights (Avx512::BlockDot).
void QuantizeActivations(const float* x, int64_t N, int64_t C, std::vector<int8_t>* xq,
                         std::vector<float>* xs, std::vector<int32_t>* xc) {
  const int64_t blocks = C / kBlock;
  xq->resize(N * C);
  xs->resize(N * blocks);
  xc->resize(N * blocks);
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = n * C + b * kBlock;
      int8_t* q = xq->data() + at;
      (*xs)[n * blocks + b] = QuantizeSymmetric(x + at, kBlock, q);
      int32_t sum = 0;
      for (int64_t c = 0; c < kBlock; ++c) sum += q[c];
      (*xc)[n * blocks + b] = 128 * sum;
    }
  }
}

// Computes y[n .. n+T, 16 p .. 16 p + 16] (T fixed by the kernel).
using TileFn = void (*)(const Int8Gemm& m, int64_t p, int64_t n);

// ---- portable: step 2 as written, one token x 16 rows per tile --------------

void TilePortable(const Int8Gemm& m, int64_t p, int64_t n) {
  const int8_t* panel = m.q + p * kPanel * m.C;
  const float* scales = m.s + p * kPanel * m.groups;
  const int8_t* x = m.xq + n * m.C;
  for (int64_t r = 0; r < kPanel; ++r) {
    float acc = 0.0f;
    for (int64_t g = 0; g < m.groups; ++g) {
      for (int64_t b = g * m.blocks_per_group; b < (g + 1) * m.blocks_per_group; ++b) {
        int32_t dot = 0;
        for (int64_t c = b * kBlock; c < (b + 1) * kBlock; ++c) {
          dot += int32_t{x[c]} * panel[Int8PanelIndex(r, c, m.C)];
        }
        const float scale = scales[Int8PanelScaleIndex(r, g, m.groups)] * m.xs[n * m.blocks + b];
        acc = std::fma(static_cast<float>(dot), scale, acc);
      }
    }
    const int64_t o = p * kPanel + r;
    m.y[n * m.OC + o] = acc + (m.b ? m.b[o] : 0.0f);
  }
}

// ---- prefill: one panel widened to fp32 ----------------------------------------

// dst [16, C] row-major = the 16 rows of panel p as q * scale. The inner
// loop is one row's 4 channels of a 64-byte group, so it vectorizes 4 wide.
void DequantizePanel(const int8_t* q, const float* s, int64_t p, int64_t C, int64_t groups,
                     float* dst) {
  const int8_t* panel = q + p * kPanel * C;
  const float* scales = s + p * kPanel * groups;
  const int64_t G = C / groups;
  for (int64_t r = 0; r < kPanel; ++r) {
    float* row = dst + r * C;
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = scales[Int8PanelScaleIndex(r, g, groups)];
      for (int64_t c = g * G; c < (g + 1) * G; c += 4) {
        const int8_t* four = panel + Int8PanelIndex(r, c, C);
        for (int64_t j = 0; j < 4; ++j) row[c + j] = static_cast<float>(four[j]) * scale;
      }
    }
  }
}

// ---- dispatch ----------------------------------------------------------------

// A level's tiles: full[t - 1] covers P panels x t tokens (t = 1..T, the
// last, partial token tile included) and one[t - 1] one panel x t tokens
// (for the panels left over at the end).
struct Kernel {
  int P, T;
  const TileFn* full;
  const TileFn* one;
};

// The SIMD levels' tiles: one source, int8_matmul-inl.h.
#define LADDER_SIMD_KERNELS "src/backend/cpu/int8_matmul-inl.h"
#include "src/backend/cpu/foreach_simd_level.h"

// Tile sizes: the accumulators (an integer and a float one per panel and
// token; two of each per token for AVX2's halves) plus the weights and
// constants must fit in the register file (16 ymm for AVX2, 32 zmm for
// AVX-512). Two panels per AVX-512 tile use each broadcast activation twice.
constexpr int kAvx2P = 1, kAvx2T = 2, kAvx512P = 2, kAvx512T = 6;
// Whether one-token tiles prefetch (int8_matmul-inl.h). With AVX-512 the
// hardware prefetcher alone kept two threads at 0.58-0.78 of the read
// bandwidth (`ladder bench matmul --tokens 1`, int8, a 2-core AMD EPYC),
// and asking 1.5 KiB ahead raised that to 0.68-0.83, as it did for
// small_matmul.cc's bf16 rows. AVX2's tile, which computes twice as long
// per byte, decoded GPT-2 124M at 224-240 tokens/s with it against 232-250
// without.
constexpr bool kAvx2Prefetch = false, kAvx512Prefetch = true;
constexpr std::array<TileFn, 1> kPortableTiles = {&TilePortable};

Kernel KernelFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return avx512::Kernels<kAvx512P, kAvx512T, kAvx512Prefetch>();
    case CpuIsa::kAvx2:
      return avx2::Kernels<kAvx2P, kAvx2T, kAvx2Prefetch>();
    case CpuIsa::kPortable:
      break;
  }
  return {1, 1, kPortableTiles.data(), kPortableTiles.data()};
}

// With several tokens, threads take the tiles' panel runs 2 at a time (96
// KiB of a 768-wide matrix for AVX-512) as they finish the last, so a
// thread slowed by another process on its core does not hold the others at
// the barrier; within a run the token tiles reuse its weights from cache.
void RunTiles(const Int8Gemm& m, const Kernel& k) {
  const int64_t panels = m.OC / kPanel;
  if (m.N == 1) {
    // One token reads each weight once, so a tile of two panels saves
    // nothing and splits the read into two streams: panels one at a time in
    // guided chunks instead (long contiguous runs first, shrinking ones at
    // the end), as small_matmul.cc's one-token rows. Decoding GPT-2 124M
    // (`bench decode --weights int8 --kv int8`), with the prefetch above:
    // 0.76-0.87 of the bound against 0.76-0.82 with two-panel tiles.
#pragma omp parallel for schedule(guided) if (m.OC * m.C >= cpu::kParallelMin)
    for (int64_t p = 0; p < panels; ++p) k.one[0](m, p, 0);
    return;
  }
  const int64_t runs = (panels + k.P - 1) / k.P;
#pragma omp parallel for schedule(dynamic, 2) if (m.N * m.OC * m.C >= cpu::kParallelMin)
  for (int64_t r = 0; r < runs; ++r) {
    const int64_t p0 = r * k.P, p1 = std::min(p0 + k.P, panels);
    for (int64_t n = 0; n < m.N; n += k.T) {
      const int64_t t = std::min<int64_t>(k.T, m.N - n);
      if (p1 - p0 == k.P) {
        k.full[t - 1](m, p0, n);
      } else {
        for (int64_t p = p0; p < p1; ++p) k.one[t - 1](m, p, n);
      }
    }
  }
}

}  // namespace

int64_t cpu::Int8KernelMaxTokens(CpuIsa isa) {
  return isa == CpuIsa::kAvx512 ? std::numeric_limits<int64_t>::max() : kSmallBatch;
}

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
  const float* b = bias.empty() ? nullptr : bias.f32();
  const CpuIsa isa = ActiveCpuIsa();
  if (N > cpu::Int8KernelMaxTokens(isa)) {
    // Prefill without VNNI: compute-bound, so the weights are widened a
    // panel at a time for sgemm (matmul_kernels.h); the activations stay
    // fp32.
    const int8_t* qp = q.i8();
    const float* sp = scales.f32();
    const int64_t groups = C / G;
    cpu::DequantizedSgemm(
        inp.f32(), N, C, OC, kPanel,
        [&](int64_t r0, int64_t /*rows: one panel*/, float* dst) {
          DequantizePanel(qp, sp, r0 / kPanel, C, groups, dst);
        },
        b, out.f32());
    return absl::OkStatus();
  }
  const Kernel kernel = KernelFor(isa);
  // Scratch for the quantized activations, kept per calling thread so a
  // decode step does not allocate.
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> xs;
  thread_local std::vector<int32_t> xc;
  QuantizeActivations(inp.f32(), N, C, &xq, &xs, &xc);
  const Int8Gemm m{.q = q.i8(),
                   .s = scales.f32(),
                   .xq = xq.data(),
                   .xs = xs.data(),
                   .xc = xc.data(),
                   .y = out.f32(),
                   .b = b,
                   .N = N,
                   .C = C,
                   .OC = OC,
                   .groups = C / G,
                   .blocks = C / kBlock,
                   .blocks_per_group = G / kBlock};
  RunTiles(m, kernel);
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
  const int64_t groups = C / G;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t r = rows.i32()[n];
    if (r < 0 || r >= OC) {
      return absl::InvalidArgumentError(
          absl::StrCat(kRows, ": row ", r, " of entry ", n, " outside [0, ", OC, ")"));
    }
    float* y = out.f32() + n * C;
    for (int64_t c = 0; c < C; ++c) {
      y[c] = static_cast<float>(q.i8()[Int8PanelIndex(r, c, C)]) *
             scales.f32()[Int8PanelScaleIndex(r, c / G, groups)];
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
