// <cuda_bf16.h> for code compiled against the CUDA simulator: the storage
// type __nv_bfloat16, the two conversions kernels use and the bit casts, with the same
// roundings as the GPU's cvt instructions (src/core/bf16.h is the one
// definition: widening is exact, narrowing rounds to nearest, ties to even).
// Like cuda_runtime.h, the names live in ladder::cuda_sim and are exported
// under CUDA's spelling.
#pragma once

#if !defined(LADDER_CUDA_SIM)
#error "the simulator's cuda_bf16.h is for -DLADDER_CUDA_SIM compilations only"
#endif

#include "src/core/bf16.h"

namespace ladder {
namespace cuda_sim {

// 16 bits, 2-byte aligned, trivially copyable: a Vec of eight is one
// 16-byte access, as on the GPU.
struct __nv_bfloat16 {
  unsigned short __x;
};

inline float __bfloat162float(__nv_bfloat16 b) { return ::ladder::Bf16ToFloat(b.__x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {::ladder::FloatToBf16(f)}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return {bits}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }

}  // namespace cuda_sim
}  // namespace ladder

using ladder::cuda_sim::__bfloat162float;      // NOLINT
using ladder::cuda_sim::__bfloat16_as_ushort;  // NOLINT
using ladder::cuda_sim::__float2bfloat16_rn;   // NOLINT
using ladder::cuda_sim::__nv_bfloat16;         // NOLINT
using ladder::cuda_sim::__ushort_as_bfloat16;  // NOLINT
