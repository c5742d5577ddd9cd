// How a kernel file is written so that one text compiles twice: by nvcc for
// the GPU, and by g++ against the CUDA simulator (src/backend/cuda_sim/),
// which runs the same kernels on the CPU in every build and in CI.
//
// The four rules every file in kernels/ follows:
//
//  1. Namespaces: open with LADDER_KERNELS_BEGIN and close with
//     LADDER_KERNELS_END (kernels/namespace.h) instead of
//     `namespace ladder { namespace kernels {`, in the .cu and in its
//     launcher header. Under the simulator they add an inline namespace `sim`,
//     so both compilations live in one binary without clashing at link time.
//
//  2. Launches (this header; only .cu files include it):
//     Launch<Kernel>(grid, block, smem_bytes, stream, args...) instead of
//     Kernel<<<grid, block, smem_bytes, stream>>>(args...). It returns the
//     launch error (cudaGetLastError) like the launchers do. Under the
//     simulator it runs the grid before returning and names the kernel (with
//     its template arguments) in every error.
//
//  3. Shared memory is dynamic only: DynamicShared<T>() returns the block's
//     dynamic shared memory (16-byte aligned), sized by the launch's
//     smem_bytes. Static `__shared__` arrays do not compile under the
//     simulator, which fills the dynamic region with a poison pattern (NaN for
//     floats) at each block's start, so a read before any write shows up.
//     A kernel needing more than 48 KiB calls AllowDynamicShared<Kernel>(bytes)
//     before its launch (cudaFuncSetAttribute; the simulator enforces the same
//     limits as an H100/H200: 48 KiB by default, 227 KiB opted in).
//
//  4. Device code uses CUDA's built-ins through the subset the simulator
//     implements (src/backend/cuda_sim/device.h lists it): thread and block
//     indices, __syncthreads, the *_sync warp shuffles and votes,
//     __syncwarp, atomics, and the math functions of <cmath>. Warp-level
//     matrix instructions go through kernels/ wrappers (one place with the
//     inline PTX and its simulated twin: kernels/tensor_core.cuh for
//     mma.sync, ldmatrix and cp.async), never inline PTX in a kernel.
//     `#pragma unroll` is fine (g++ ignores it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/namespace.h"

LADDER_KERNELS_BEGIN

// Shared memory a block may use without opting in.
inline constexpr size_t kDefaultDynamicShared = 48 * 1024;

#if defined(LADDER_CUDA_SIM)

template <auto kKernel, typename... Args>
cudaError_t Launch(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, Args... args) {
  return ::ladder::cuda_sim::LaunchKernel<kKernel>(grid, block, smem_bytes, stream, args...);
}

template <typename T>
inline T* DynamicShared() {
  return static_cast<T*>(::ladder::cuda_sim::DynamicSharedMemory());
}

#else  // nvcc

template <auto kKernel, typename... Args>
cudaError_t Launch(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, Args... args) {
  kKernel<<<grid, block, smem_bytes, stream>>>(args...);
  return cudaGetLastError();
}

template <typename T>
__device__ __forceinline__ T* DynamicShared() {
  extern __shared__ float4 ladder_dynamic_shared[];  // float4: 16-byte aligned
  return reinterpret_cast<T*>(ladder_dynamic_shared);
}

#endif

// Raises kKernel's dynamic shared memory limit to `bytes` when that is more
// than the default 48 KiB (a no-op otherwise).
template <auto kKernel>
cudaError_t AllowDynamicShared(size_t bytes) {
  if (bytes <= kDefaultDynamicShared) return cudaSuccess;
  return cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

LADDER_KERNELS_END
