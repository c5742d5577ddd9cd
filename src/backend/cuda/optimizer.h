// The optimizer's ops on the GPU: the Tensor/Status face of
// kernels/optimizer.cu. Tensors on the GPU (Device::kCuda); work is enqueued
// on `stream` and not waited for.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/namespace.h"
#include "src/backend/backend.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// ---- sum of squares -----------------------------------------------------------------

// f32 elements of GPU scratch SumOfSquares needs for a tensor of n elements.
int64_t SumOfSquaresScratchFloats(int64_t n);

// out (one f32 element on the GPU, overwritten) = sum of x's squares,
// accumulated in double in an order fixed by x.numel(), rounded to float
// once. Backend::SumOfSquares returns the double; here the result stays on
// the device so the clip scale can be computed there without a round trip.
// scratch: f32, at least SumOfSquaresScratchFloats(x.numel()) elements,
// 8-byte aligned (it holds doubles; overwritten).
absl::Status SumOfSquares(Tensor out, Tensor x, Tensor scratch, cudaStream_t stream = nullptr);

// ---- multi-tensor AdamW ---------------------------------------------------------------

// Bytes of GPU memory the descriptors of `count` tensors take.
int64_t AdamWDescriptorBytes(int count);

// Backend::AdamWUpdate applied to every tensor in ONE kernel launch.
// descriptors: a GPU tensor of any dtype with at least
// AdamWDescriptorBytes(tensors.size()) bytes, 8-byte aligned; the tensors'
// descriptors are copied into it (from pageable memory: the copy is staged
// before this returns, so nothing here needs to outlive the call) and the
// kernel reads them from there. Tensors must not overlap one another.
absl::Status AdamWUpdate(const std::vector<AdamWTensor>& tensors, const AdamWParams& p,
                         Tensor descriptors, cudaStream_t stream = nullptr);

// ---- bf16 copies --------------------------------------------------------------------------

// Backend::RoundToBf16: dst (bf16) = src (f32) rounded to nearest even, or
// stochastically with sr's Philox words (backend.h StochasticRounding).
absl::Status RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr,
                         cudaStream_t stream = nullptr);

LADDER_CUDA_END
