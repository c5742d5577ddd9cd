// cuda_device.h for builds without CUDA.
#include "src/backend/cuda/cuda_device.h"

namespace ladder {

bool CudaCompiled() { return false; }

int CudaDeviceCount(std::string* why_none) {
  if (why_none != nullptr) *why_none = "CUDA not compiled into this binary";
  return 0;
}

std::string CudaSummary() { return "cuda: not compiled"; }

}  // namespace ladder
