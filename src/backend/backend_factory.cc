#include "src/backend/backend_factory.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cuda/cuda_device.h"
#include "src/core/launcher_env.h"

namespace ladder {
namespace {

// ==== Where the CUDA backends plug in ========================================
// Neither the CUDA backend nor the simulator-backed one exists yet. When one
// lands, CudaBackendInBuild() says whether this binary has it and
// MakeCudaBackend constructs it; nothing else in ladder changes.
bool CudaBackendInBuild() { return false; }

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(bool simulated) {
  return absl::FailedPreconditionError(
      absl::StrCat("the ", simulated ? "cuda-sim" : "cuda", " backend is not in this build yet"));
}
// =============================================================================

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view device) {
  if (device == "cpu") return std::make_unique<CpuBackend>();
  if (device == "cuda-sim") return MakeCudaBackend(/*simulated=*/true);
  if (device != "cuda" && device != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("unknown device '", std::string(device),
                                                   "' (expected auto, cpu, cuda or cuda-sim)"));
  }
  std::string why;  // why no GPU is usable
  const bool gpu = CudaDeviceCount(&why) > 0;
  if (device == "cuda") {
    if (!gpu) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device cuda: no usable GPU (", why, ")"));
    }
    return MakeCudaBackend(/*simulated=*/false);
  }
  // auto: the GPU where this binary can drive it, else the CPU, said once.
  const bool cuda = gpu && CudaBackendInBuild();
  if (gpu && !cuda) why = "a GPU is present but this build has no CUDA backend";
  if (IsFirstLaunchedRank()) {
    std::fprintf(stderr, "ladder: device auto: %s (%s)\n", cuda ? "cuda" : "cpu",
                 cuda ? "a GPU is usable" : why.c_str());
  }
  if (cuda) return MakeCudaBackend(/*simulated=*/false);
  return std::make_unique<CpuBackend>();
}

}  // namespace ladder
