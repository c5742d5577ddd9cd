// int8 weights for inference: the W8A8 linear layer (MatmulInt8Forward) and
// the int8 table lookup (DequantizeRows).
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
// ---- DequantizeRows ----------------------------------------------------------
// out[n, c] = float(q[rows[n], c]) * s[rows[n], c / G]: one thread per output
// element, bitwise the CPU's. Reads one byte (scattered by the panel layout:
// a row's 4 channels every 64 bytes) and writes 4 bytes per element.
#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/int8_matmul.h"
#include "kernels/launch.cuh"

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
