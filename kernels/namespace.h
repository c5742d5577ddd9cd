// The namespaces of code that compiles twice (rule 1 of kernels/launch.cuh),
// in a header plain C++ can include: the kernels (kernels/*.cu and their
// launcher headers) and the CUDA backend's host side (src/backend/cuda/).
//
// The GPU build's copy lives in ladder::kernels and ladder::cuda; the
// simulator's copy of the same text (compiled with -DLADDER_CUDA_SIM) adds the
// inline namespace `sim`, so the two sets of symbols never collide in one
// binary, while kernels::Foo and cuda::Foo name the right one in each.
#pragma once

#if defined(LADDER_CUDA_SIM)
#define LADDER_KERNELS_BEGIN \
  namespace ladder {         \
  namespace kernels {        \
  inline namespace sim {
#define LADDER_CUDA_BEGIN \
  namespace ladder {      \
  namespace cuda {        \
  inline namespace sim {
#define LADDER_KERNELS_END \
  }                        \
  }                        \
  }
#else
#define LADDER_KERNELS_BEGIN \
  namespace ladder {         \
  namespace kernels {
#define LADDER_CUDA_BEGIN \
  namespace ladder {      \
  namespace cuda {
#define LADDER_KERNELS_END \
  }                        \
  }
#endif
#define LADDER_CUDA_END LADDER_KERNELS_END
