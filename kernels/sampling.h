// Launcher of kernels/sampling.cu: next-token sampling on the device,
// callable from host C++ (g++). Raw device pointers, work enqueued on
// `stream`, the launch error returned. The contract is Backend::SampleTokens
// (src/backend/backend.h) and its definition src/backend/token_sampling.h;
// argument checks live in the caller (src/backend/cuda/sampling.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// One draw as the kernel reads it: a TokenSampleSpec staged to the device.
struct SampleRow {
  double temperature;  // <= 0: greedy
  double top_p;        // in (0, 1]
  double uniform;      // in [0, 1)
  int64_t row;         // the logits row
  int32_t top_k;       // 0 or >= V: no cut
  int32_t unused;
};

// ids[j] = the token drawn for specs[j] (j < M) from the first V columns of
// row specs[j].row of logits (rows `ld` floats apart; V <= ld). One block per
// spec, so M may be up to 2^31 - 1.
cudaError_t LaunchSampleTokens(int32_t* ids, const float* logits, int64_t ld, int V,
                               const SampleRow* specs, int M, cudaStream_t stream);

LADDER_KERNELS_END
