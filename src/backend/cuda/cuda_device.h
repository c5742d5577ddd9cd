// What this binary knows about CUDA at run time. Present in every build: in a
// build without CUDA (-Dcuda=disabled, or no toolkit found) the functions
// report "not compiled", so callers need no #ifdef.
#pragma once

#include <string>

namespace ladder {

// True iff the binary was built with the CUDA kernels.
bool CudaCompiled();

// Number of usable CUDA devices. 0 when CUDA is not compiled in, when there is
// no driver or no GPU; then *why_none (if non-null) gets the reason, e.g.
// "no NVIDIA driver (libcuda.so.1 not found)".
int CudaDeviceCount(std::string* why_none);

// One line for `ladder version`, e.g.
//   "cuda: compiled for sm_90 (runtime 13.0, cuBLASLt 13.1.0), 1 device: NVIDIA H200
//    (sm_90, 140 GiB)"
//   "cuda: compiled for sm_90 (runtime 13.0, cuBLASLt 13.1.0), no device (<reason>):
//    running on the CPU"
//   "cuda: not compiled"
// It loads cuBLASLt (cublaslt_library.h) to name its version, or says
// "cuBLASLt not loadable: <reason>".
std::string CudaSummary();

}  // namespace ladder
