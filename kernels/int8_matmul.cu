// int8 weights for inference: the linear layer (MatmulInt8Forward) with fp32
// activations (W8A8) or bf16 activations (W8A16), and the int8 table lookup
// (DequantizeRows).
//
// ---- MatmulInt8Forward ------------------------------------------------------
// out [N,OC] = inp [N,C] @ dequant(W)^T + bias, W int8 in groups of G input
// channels with one f32 scale per group, stored in quantize.h's panels of 16
// rows. Decoding reads every weight once per token and does two FLOPs per
// weight, so it is bound by memory bandwidth; int8 weights move a quarter of
// fp32's bytes. The CPU backend quantizes the activations too, per token in
// blocks of 32 channels (llama.cpp's Q8_0 x Q8_0), so that each block's dot
// product is exact integer arithmetic and costs one float multiply-add:
//   1. x[n, c] ~= xq[n, c] * xs[n, c / 32]             (QuantizeSymmetric)
//   2. per output (n, o), over the blocks b in order:
//        dot = sum_{c in b} xq[n, c] * q[o, c]          (int32, exact)
//        acc = fmaf(float(dot), s[o, b*32 / G] * xs[n, b], acc)
//      out[n, o] = acc + bias[o]   (+ 0.0f without a bias, as the CPU does)
// |dot| <= 32 * 127 * 127 < 2^24, so float(dot) is exact too. This kernel
// computes exactly those float operations in that order, so its output is
// bitwise the CPU's W8A8 output (the CPU path for up to kSmallBatch = 16
// tokens; above that the CPU switches to fp32 activations through sgemm,
// which the GPU does not follow: its result stays the W8A8 one for any N).
//
// What it fuses: the activation quantization (step 1) happens in shared
// memory inside the matmul, a chunk of 512 channels at a time; no quantized
// copy of the activations goes to global memory and the op needs no scratch.
// Each block quantizes the tokens it serves again (N * C work per block,
// against 32 * N * C multiply-adds of matmul per block: ~3%).
//
// Bytes: OC*C weight bytes + 4*OC*C/G scale bytes from HBM (the token
// tiles of one row block run side by side and share them through L2),
// 4*N*C activation bytes per row block (L2), 4*N*OC written. FLOPs: 2*N*OC*C integer multiply-adds'
// worth, plus one fma per 32 channels. At decode sizes (N <= 8) the weights are nearly all the
// bytes.
//
// Launch shape: a block of 8 warps serves 32 output rows (two panels) and a
// tile of 8 tokens; grid (ceil(N / 8), OC / 32): token tiles in x, so the
// blocks that read the same weights are launched together (and x, unlike
// y, has room for any N). Lane = row: the 32 lanes
// read a row's 4 channels as one 32-bit word each, which in the panel layout
// is two runs of 64 contiguous bytes per warp-wide load. Per chunk of 16
// blocks (512 channels):
//   - the 8 warps quantize the tile's 8 tokens x 16 blocks into shared
//     memory, one (token, block) per warp at a time: lane = channel, so the
//     block's max|x| is a warp shuffle max (exact in any order);
//   - warp w computes the integer dot products of blocks w and w + 8 for all
//     8 tokens (each weight word is loaded once and used 8 times) and
//     stores them to shared memory;
//   - warp t then runs token t's float chain over the 16 blocks in order,
//     carrying acc in a register from chunk to chunk.
// The integer work, which is most of it, is spread over the 8 warps; only
// the float chain, whose order fixes the bits, is sequential per output.
// Plain integer multiply-adds on bytes unpacked from the words (no __dp4a:
// one kernel text for the GPU and the simulator; dp4a is a later step).
//
// ---- MatmulInt8Forward, W8A16 (bf16 activations) ------------------------------
// out [N, OC] bf16 = inp [N, C] bf16 @ dequant(W)^T + bias (f32), with no
// activation quantization: the int8 weights are widened to bf16 in registers
// (exactly: |q| <= 127 needs 7 significant bits, bf16 has 8) and multiplied
// with the activations on the tensor cores (mma.sync m16n8k16, fp32
// accumulators, tensor_core.cuh). Per 16 input channels (one mma step) the
// mma sums the 16 products q * x of each (row, token) from zero; that part
// is then scaled by its group's scale into the fp32 accumulator,
//   acc = fmaf(part, s[o, c / G], acc)           (steps in increasing order)
// and out = bf16(acc + bias), rounded once (or acc + bias in f32: the
// head's logits, which sampling reads in f32). The weights move once from HBM
// per 32-token tile (decode: once), 1 byte each; the scales are 4 bytes per
// G weights; the activations come from L2.
//
// Fragments straight from the panel layout, no shared memory: lane (g, t)
// (g = lane / 4, t = lane % 4) of a step reads the two 4-byte words of panel
// rows 2g and 2g + 1 at channels 4t .. 4t + 3 (one 8-byte load; the warp's
// 32 loads cover the step's 256 contiguous bytes). Because an mma sums over
// k and its rows are independent, the kernel relabels both: logical row g is
// physical row 2g and logical row g + 8 is 2g + 1; logical channels
// (2t, 2t + 1) are physical 4t, 4t + 1 and (2t + 8, 2t + 9) are 4t + 2,
// 4t + 3. With that, the A fragment (tensor_core.cuh) is the lane's own two
// words split in halves, and the B fragment (the activations, "col": token g)
// is one 8-byte load of inp[token][4t .. 4t + 3], the same relabelling.
// The accumulators c[0..3] are rows 2g, 2g, 2g + 1, 2g + 1 and tokens
// 2t, 2t + 1, 2t, 2t + 1 of the 8-token tile.
//
// Launch shape: a block of 4 warps serves one panel (16 output rows) and a
// tile of 32 tokens (4 mma tiles of 8); grid (ceil(N / 32), OC / 16). The
// panel's steps are dealt to the warps round robin (warp w: steps w, w + 4,
// ...), each warp keeping accumulators for the 32 tokens, and the block
// adds the 4 warps' sums in warp order through shared memory. Decoding
// (N = 1) thus still spreads every weight matrix over OC / 16 blocks of 4
// warps. The order of every sum is fixed by C and G alone, never by N or
// the launch: a token's row is the same bits whatever else is in the batch
// (continuous batching stays deterministic), as for W8A8.
//
// ---- DequantizeRows ----------------------------------------------------------
// out[n, c] = float(q[rows[n], c]) * s[rows[n], c / G]: one thread per output
// element, bitwise the CPU's. Reads one byte (scattered by the panel layout:
// a row's 4 channels every 64 bytes) and writes 4 bytes per element.
#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/int8_matmul.h"
#include "kernels/launch.cuh"
#include "kernels/tensor_core.cuh"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kPanelRows = 16;            // quantize.h kInt8PanelRows
constexpr int kQBlock = 32;               // activation block (channels per scale)
constexpr int kRowsPerBlock = kWarpSize;  // output rows per thread block (two panels)
constexpr int kTokens = 8;                // tokens per thread block
constexpr int kWarps = 8;                 // = kTokens: warp t runs token t's float chain
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kChunkBlocks = 16;  // activation blocks per shared-memory chunk
constexpr int kWordsPerBlock = kQBlock / 4;
constexpr int kDequantThreads = 256;
constexpr unsigned kMaxGridY = 65535;  // CUDA's limit on gridDim.y

static_assert(kWarps == kTokens, "warp t owns token t's accumulators");
static_assert(kChunkBlocks % kWarps == 0, "every warp gets the same number of blocks");

// W8A16.
constexpr int kW16Warps = 4;  // warps splitting one panel's mma steps
constexpr int kW16Threads = kW16Warps * kWarpSize;
constexpr int kW16Tiles = 4;  // mma tiles of 8 tokens per block
constexpr int kW16Tokens = 8 * kW16Tiles;
constexpr int kStepChannels = 16;  // input channels per mma step (k16)

// quantize.h Int8PanelIndex / Int8PanelScaleIndex.
__device__ __forceinline__ size_t PanelIndex(int r, int c, int C) {
  return static_cast<size_t>(r / kPanelRows) * kPanelRows * C + (c / 4) * (kPanelRows * 4) +
         (r % kPanelRows) * 4 + c % 4;
}
__device__ __forceinline__ size_t PanelScaleIndex(int r, int g, int groups) {
  return static_cast<size_t>(r / kPanelRows) * kPanelRows * groups + g * kPanelRows +
         r % kPanelRows;
}

// Sum of the 4 signed byte products of two words.
__device__ __forceinline__ int32_t Dot4(int32_t a, int32_t b) {
  int32_t s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s += static_cast<int32_t>(static_cast<int8_t>(a >> (8 * i))) *
         static_cast<int32_t>(static_cast<int8_t>(b >> (8 * i)));
  }
  return s;
}

// Shared memory of one chunk: the tile's quantized activations (as words),
// their scales, and the integer dot products.
struct Chunk {
  int32_t xq[kTokens][kChunkBlocks * kWordsPerBlock];
  float xs[kTokens][kChunkBlocks];
  int32_t dot[kTokens][kChunkBlocks][kRowsPerBlock];
};

// Grid (ceil(N / 8), ceil(OC / 32)), kThreads threads, sizeof(Chunk) bytes.
__global__ void __launch_bounds__(kThreads)
    MatmulInt8Kernel(float* __restrict__ out, const float* __restrict__ inp,
                     const int8_t* __restrict__ q, const float* __restrict__ scales,
                     const float* __restrict__ bias, int N, int C, int OC, int G) {
  Chunk& sh = *DynamicShared<Chunk>();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.y * kRowsPerBlock + lane;  // this lane's output row
  const bool row_ok = row < OC;                       // OC is a multiple of 16, not of 32
  const int n0 = blockIdx.x * kTokens;
  const int blocks = C / kQBlock, groups = C / G, blocks_per_group = G / kQBlock;
  // A row's words: panel base plus 64 bytes per 4 channels.
  const int8_t* q_row = q + PanelIndex(row_ok ? row : 0, 0, C);

  float acc = 0.0f;  // output (n0 + warp, row): warp t's chain is token t's
  for (int b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const int nb = MinInt(kChunkBlocks, blocks - b0);
    __syncthreads();  // the previous chunk's dots and scales are no longer read

    // Step 1: quantize (token t, block b) pairs, lane = channel.
    for (int pair = warp; pair < kTokens * kChunkBlocks; pair += kWarps) {
      const int t = pair / kChunkBlocks, b = pair % kChunkBlocks;
      const int n = n0 + t;
      const float x =
          (n < N && b < nb) ? inp[static_cast<size_t>(n) * C + (b0 + b) * kQBlock + lane] : 0.0f;
      const float amax = WarpMax(fabsf(x));
      const float s = amax / 127.0f;
      const float inv = s > 0.0f ? 1.0f / s : 0.0f;
      float v = x * inv;
      v = v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v);
      reinterpret_cast<int8_t*>(sh.xq[t])[b * kQBlock + lane] =
          static_cast<int8_t>(static_cast<int32_t>(rintf(v)));
      if (lane == 0) sh.xs[t][b] = s;
    }
    __syncthreads();

    // Step 2a: integer dots of blocks warp, warp + 8 for the 8 tokens.
    for (int b = warp; b < nb; b += kWarps) {
      int32_t dot[kTokens];
#pragma unroll
      for (int t = 0; t < kTokens; ++t) dot[t] = 0;
      if (row_ok) {
        const int8_t* w = q_row + static_cast<size_t>(b0 + b) * kWordsPerBlock * (kPanelRows * 4);
#pragma unroll
        for (int k = 0; k < kWordsPerBlock; ++k) {
          const int32_t wk = *reinterpret_cast<const int32_t*>(w + k * (kPanelRows * 4));
#pragma unroll
          for (int t = 0; t < kTokens; ++t) dot[t] += Dot4(wk, sh.xq[t][b * kWordsPerBlock + k]);
        }
      }
#pragma unroll
      for (int t = 0; t < kTokens; ++t) sh.dot[t][b][lane] = dot[t];
    }
    __syncthreads();

    // Step 2b: token `warp`'s float chain over the chunk's blocks, in order.
    if (row_ok) {
      for (int b = 0; b < nb; ++b) {
        const int g = (b0 + b) / blocks_per_group;
        const float scale = scales[PanelScaleIndex(row, g, groups)] * sh.xs[warp][b];
        acc = fmaf(static_cast<float>(sh.dot[warp][b][lane]), scale, acc);
      }
    }
  }
  const int n = n0 + warp;
  if (row_ok && n < N) {
    out[static_cast<size_t>(n) * OC + row] = acc + (bias != nullptr ? bias[row] : 0.0f);
  }
}

// Two int8 (the low 16 bits of v) as a bf16 pair, the lower byte in the low
// half; exact.
__device__ __forceinline__ uint32_t Int8PairToBf16x2(uint32_t v) {
  return PackBf16x2(static_cast<float>(static_cast<int8_t>(v & 0xffu)),
                    static_cast<float>(static_cast<int8_t>((v >> 8) & 0xffu)));
}

// The 4 warps' sums for the block's tokens and rows, added in warp order.
struct W16Partials {
  float acc[kW16Warps][kW16Tokens][kPanelRows];
};

// Grid (ceil(N / 32), OC / 16), kW16Threads threads, sizeof(W16Partials) bytes.
// O: the output's type (bf16, or f32 for the logits of the head).
template <typename O>
__global__ void __launch_bounds__(kW16Threads)
    MatmulW8A16Kernel(O* __restrict__ out, const __nv_bfloat16* __restrict__ inp,
                      const int8_t* __restrict__ q, const float* __restrict__ scales,
                      const float* __restrict__ bias, int N, int C, int OC, int G) {
  W16Partials& sh = *DynamicShared<W16Partials>();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int g = lane / 4, t = lane % 4;
  const int panel = blockIdx.y, n0 = blockIdx.x * kW16Tokens;
  const int tiles = MinInt(kW16Tiles, (N - n0 + 7) / 8);  // tiles holding a token
  const int steps = C / kStepChannels, groups = C / G;
  // This lane's words of step s: panel base + (4s + t) * 64 + 8g.
  const int8_t* q_lane =
      q + static_cast<size_t>(panel) * kPanelRows * C + t * (kPanelRows * 4) + 8 * g;
  const float* s_panel = scales + static_cast<size_t>(panel) * kPanelRows * groups;
  // inp rows of this lane's token in each tile, at channel 4t.
  const __nv_bfloat16* x_lane = inp + static_cast<size_t>(n0 + g) * C + 4 * t;

  float acc[kW16Tiles][4];
#pragma unroll
  for (int j = 0; j < kW16Tiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll 4
  for (int s = warp; s < steps; s += kW16Warps) {
    const uint2 w =
        *reinterpret_cast<const uint2*>(q_lane + static_cast<size_t>(s) * 4 * (kPanelRows * 4));
    const uint32_t a[4] = {Int8PairToBf16x2(w.x), Int8PairToBf16x2(w.y),
                           Int8PairToBf16x2(w.x >> 16), Int8PairToBf16x2(w.y >> 16)};
    const float* s_group = s_panel + (s * kStepChannels / G) * kPanelRows + 2 * g;
    const float s0 = s_group[0], s1 = s_group[1];  // rows 2g, 2g + 1
#pragma unroll
    for (int j = 0; j < kW16Tiles; ++j) {
      if (j >= tiles) break;  // the same in every lane
      uint32_t b[2] = {0u, 0u};
      if (n0 + 8 * j + g < N) {
        const uint2 x = *reinterpret_cast<const uint2*>(x_lane + static_cast<size_t>(8 * j) * C +
                                                        s * kStepChannels);
        b[0] = x.x;
        b[1] = x.y;
      }
      const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      float part[4];
      MmaBf16_16816(part, a, b, zero);
      acc[j][0] = fmaf(part[0], s0, acc[j][0]);
      acc[j][1] = fmaf(part[1], s0, acc[j][1]);
      acc[j][2] = fmaf(part[2], s1, acc[j][2]);
      acc[j][3] = fmaf(part[3], s1, acc[j][3]);
    }
  }
#pragma unroll
  for (int j = 0; j < kW16Tiles; ++j) {
    const int tok = 8 * j + 2 * t;
    sh.acc[warp][tok][2 * g] = acc[j][0];
    sh.acc[warp][tok + 1][2 * g] = acc[j][1];
    sh.acc[warp][tok][2 * g + 1] = acc[j][2];
    sh.acc[warp][tok + 1][2 * g + 1] = acc[j][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kW16Tokens * kPanelRows; i += kW16Threads) {
    const int tok = i / kPanelRows, r = i % kPanelRows, n = n0 + tok;
    if (n >= N) continue;
    float v = sh.acc[0][tok][r];
#pragma unroll
    for (int w = 1; w < kW16Warps; ++w) v += sh.acc[w][tok][r];
    const int row = panel * kPanelRows + r;
    out[static_cast<size_t>(n) * OC + row] = FromFloat<O>(v + (bias != nullptr ? bias[row] : 0.0f));
  }
}

// One thread per element of out [N, C].
__global__ void __launch_bounds__(kDequantThreads)
    DequantizeRowsKernel(float* __restrict__ out, const int8_t* __restrict__ q,
                         const float* __restrict__ scales, const int32_t* __restrict__ rows, int N,
                         int C, int OC, int G) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(N) * C) return;
  const int n = static_cast<int>(idx / C), c = static_cast<int>(idx % C);
  const int r = rows[n];
  if (r < 0 || r >= OC) {
    out[idx] = NAN;  // see the header
    return;
  }
  out[idx] = static_cast<float>(q[PanelIndex(r, c, C)]) * scales[PanelScaleIndex(r, c / G, C / G)];
}

}  // namespace

cudaError_t LaunchMatmulInt8Forward(float* out, const float* inp, const int8_t* q,
                                    const float* scales, const float* bias, int N, int C, int OC,
                                    int G, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return cudaSuccess;
  if (C <= 0 || C % kQBlock != 0 || G <= 0 || G % kQBlock != 0 || C % G != 0 ||
      OC % kPanelRows != 0 || reinterpret_cast<uintptr_t>(q) % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid((N + kTokens - 1) / kTokens, (OC + kRowsPerBlock - 1) / kRowsPerBlock);
  if (grid.y > kMaxGridY) return cudaErrorInvalidValue;  // OC above 2 million
  return Launch<MatmulInt8Kernel>(grid, kThreads, sizeof(Chunk), stream, out, inp, q, scales, bias,
                                  N, C, OC, G);
}

template <typename O>
cudaError_t LaunchMatmulInt8ForwardBf16(O* out, const __nv_bfloat16* inp, const int8_t* q,
                                        const float* scales, const float* bias, int N, int C,
                                        int OC, int G, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return cudaSuccess;
  if (C <= 0 || C % kQBlock != 0 || G <= 0 || G % kQBlock != 0 || C % G != 0 ||
      OC % kPanelRows != 0 || reinterpret_cast<uintptr_t>(q) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(inp) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid((N + kW16Tokens - 1) / kW16Tokens, OC / kPanelRows);
  if (grid.y > kMaxGridY) return cudaErrorInvalidValue;  // OC above a million
  return Launch<MatmulW8A16Kernel<O>>(grid, kW16Threads, sizeof(W16Partials), stream, out, inp, q,
                                      scales, bias, N, C, OC, G);
}
template cudaError_t LaunchMatmulInt8ForwardBf16<__nv_bfloat16>(__nv_bfloat16*,
                                                                const __nv_bfloat16*, const int8_t*,
                                                                const float*, const float*, int,
                                                                int, int, int, cudaStream_t);
template cudaError_t LaunchMatmulInt8ForwardBf16<float>(float*, const __nv_bfloat16*, const int8_t*,
                                                        const float*, const float*, int, int, int,
                                                        int, cudaStream_t);

cudaError_t LaunchDequantizeRows(float* out, const int8_t* q, const float* scales,
                                 const int32_t* rows, int N, int C, int OC, int G,
                                 cudaStream_t stream) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  if (G <= 0 || C % G != 0 || OC % kPanelRows != 0) return cudaErrorInvalidValue;
  const size_t n = static_cast<size_t>(N) * C;
  const unsigned blocks = static_cast<unsigned>((n + kDequantThreads - 1) / kDequantThreads);
  return Launch<DequantizeRowsKernel>(blocks, kDequantThreads, 0, stream, out, q, scales, rows, N,
                                      C, OC, G);
}

LADDER_KERNELS_END
