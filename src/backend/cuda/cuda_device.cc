// cuda_device.h for CUDA builds. The runtime is linked statically and loads
// the driver (libcuda.so.1) with dlopen on its first call, so everything here
// works, and reports the reason, on a machine without a GPU or a driver.
#include "src/backend/cuda/cuda_device.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "src/backend/cuda/cublaslt_library.h"

#ifndef LADDER_CUDA_ARCHS
#define LADDER_CUDA_ARCHS "?"
#endif

namespace ladder {
namespace {

std::string ErrorText(cudaError_t err) {
  return absl::StrCat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

// The static runtime answers cudaErrorInsufficientDriver both when the driver
// is too old and when there is none at all; tell the two apart.
std::string NoDeviceReason(cudaError_t err) {
  if (err == cudaErrorInsufficientDriver) {
    void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (lib == nullptr) return "no NVIDIA driver (libcuda.so.1 not found)";
    dlclose(lib);
    return absl::StrCat(ErrorText(err), " (the driver is older than CUDA runtime ",
                        CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10, ")");
  }
  if (err == cudaErrorNoDevice) return "no CUDA-capable GPU visible (cudaErrorNoDevice)";
  return ErrorText(err);
}

}  // namespace

bool CudaCompiled() { return true; }

int CudaDeviceCount(std::string* why_none) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the runtime's last-error slot
    if (why_none != nullptr) *why_none = NoDeviceReason(err);
    return 0;
  }
  if (n == 0 && why_none != nullptr) *why_none = "no CUDA-capable GPU visible";
  return n;
}

std::string CudaSummary() {
  std::string line =
      absl::StrCat("cuda: compiled for ", LADDER_CUDA_ARCHS, " (runtime ", CUDART_VERSION / 1000,
                   ".", CUDART_VERSION % 1000 / 10, ", ", cuda::CublasLtSummary(), ")");
  std::string why;
  const int n = CudaDeviceCount(&why);
  if (n == 0) return absl::StrCat(line, ", no device (", why, "): running on the CPU");

  // Each model once (consecutive identical devices collapse: a node usually
  // has one model).
  std::string models;
  std::string previous;
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    std::string model = absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ", ",
                                     (prop.totalGlobalMem + (1ull << 29)) >> 30, " GiB)");
    if (model == previous) continue;
    absl::StrAppend(&models, models.empty() ? "" : ", ", model);
    previous = model;
  }
  return absl::StrCat(line, ", ", n, n == 1 ? " device: " : " devices: ", models);
}

}  // namespace ladder
