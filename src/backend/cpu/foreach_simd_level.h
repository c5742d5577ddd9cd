// Compiles a kernel's SIMD text once per level (simd.h explains why).
//
// Use, in the kernel's .cc (which includes simd.h with its other headers),
// inside its own namespace and after everything the text uses:
//   #define LADDER_SIMD_KERNELS "src/backend/cpu/small_matmul-inl.h"
//   #include "src/backend/cpu/foreach_simd_level.h"
// which defines the text's functions in namespaces avx2 and avx512, built
// for those targets, with V naming the level. Included once per kernel
// file, so there is no include guard; it undefines LADDER_SIMD_KERNELS.
#ifndef LADDER_SIMD_KERNELS
#error "define LADDER_SIMD_KERNELS as the kernel text to compile per level"
#endif

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
using V = ::ladder::cpu::Avx2;
#include LADDER_SIMD_KERNELS
}  // namespace avx2
#pragma GCC pop_options

LADDER_AVX512_BEGIN
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
namespace avx512 {
using V = ::ladder::cpu::Avx512;
#include LADDER_SIMD_KERNELS
}  // namespace avx512
#pragma GCC pop_options
LADDER_AVX512_END

#undef LADDER_SIMD_KERNELS
