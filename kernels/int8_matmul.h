// Launchers of kernels/int8_matmul.cu: the int8-weight linear layer of
// inference (W8A8, and W8A16 for bf16 activations) and the int8 table
// lookup, callable from host C++ (g++). Raw device pointers, work enqueued
// on `stream`, the launch error returned. Shape checks live in the callers
// (src/backend/cuda/int8_matmul.h).
//
// The contract is Backend::MatmulInt8Forward and Backend::DequantizeRows
// (src/backend/backend.h). The weights are an [OC, C] matrix in quantize.h's
// panel layout (PackInt8Panels): q [OC, C] i8 in panels of 16 rows, 4 input
// channels at a time; scales [OC, C / G] f32 in panels of 16 rows, group by
// group. OC is a multiple of 16, G a multiple of 32 that divides C, and q is
// 4-byte aligned (the kernel reads a row's 4 channels as one word).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// out [N, OC] = inp [N, C] @ dequant(W)^T + bias (bias may be null), computed
// exactly as the CPU backend's W8A8 path (int8_matmul.cc), bit for bit:
// each token's activations quantized per block of 32 channels
// (QuantizeSymmetric), an exact int32 dot product per block, and per output
// acc = fmaf(float(dot), w_scale * x_scale, acc) over the blocks in order,
// then out = acc + bias (or + 0). The result depends on neither N nor the
// launch shape.
cudaError_t LaunchMatmulInt8Forward(float* out, const float* inp, const int8_t* q,
                                    const float* scales, const float* bias, int N, int C, int OC,
                                    int G, cudaStream_t stream);

// W8A16: out [N, OC] bf16 = inp [N, C] bf16 @ dequant(W)^T + bias (f32, may
// be null), on the tensor cores: per 16 input channels, in order, the exact
// products q * x summed by an mma from zero, then acc = fmaf(part, scale,
// acc) in fp32; out = bf16(acc + bias), rounded once to nearest even. The
// bits of a token's row depend on C, G and its own activations only, never
// on N or the rest of the batch. q and inp 8-byte aligned.
// O is __nv_bfloat16, or float to keep the fp32 result unrounded (logits).
template <typename O>
cudaError_t LaunchMatmulInt8ForwardBf16(O* out, const __nv_bfloat16* inp, const int8_t* q,
                                        const float* scales, const float* bias, int N, int C,
                                        int OC, int G, cudaStream_t stream);

// out [N, C] = dequant(W)[rows[n], :] = float(q) * scale, bit for bit as the
// CPU. rows [N] i32 lives on the device: an entry outside [0, OC) gives a row
// of NaN (the CPU backend rejects it with InvalidArgument).
cudaError_t LaunchDequantizeRows(float* out, const int8_t* q, const float* scales,
                                 const int32_t* rows, int N, int C, int OC, int G,
                                 cudaStream_t stream);

LADDER_KERNELS_END
