// cuBLASLt, the CUDA backend's matmul library, as a library loaded on first
// use. Linking libcublasLt.so costs every process that starts about half a
// second (its static initializers and hundreds of thousands of relocations),
// GPU or not; ladder's CPU runs, MPI ranks and tests would all pay it. So
// CUDA builds do not link it: cublaslt_library.cc defines the cuBLASLt
// functions ladder calls, each forwarding to libcublasLt.so.<major> opened
// with dlopen the first time one is called. The simulator's cuBLASLt
// (src/backend/cuda_sim/cublaslt.cc) is built in and always available.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "kernels/namespace.h"

LADDER_CUDA_BEGIN

#if defined(LADDER_CUDA_SIM)
// The simulator's cuBLASLt is part of it: always loaded.
inline absl::Status LoadCublasLt() { return absl::OkStatus(); }
#else
// Loads cuBLASLt if it is not loaded yet (once per process; any thread).
// OK when its functions can be called; FailedPrecondition naming the library
// and dlopen's reason otherwise, in which case every cuBLASLt call returns
// CUBLAS_STATUS_NOT_INITIALIZED.
absl::Status LoadCublasLt();

// For `ladder version`: "cuBLASLt 13.1.0", or why it cannot be loaded.
std::string CublasLtSummary();
#endif

LADDER_CUDA_END
