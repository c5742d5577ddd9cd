#include "src/backend/backend_factory.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cuda/cuda_backends.h"
#include "src/backend/cuda/cuda_device.h"
#include "src/core/launcher_env.h"
#include "src/parallel/mpi_comm.h"

namespace ladder {
namespace {

// The CUDA backend on a GPU. Only reached when CudaDeviceCount found one,
// which a binary without CUDA never does.
absl::StatusOr<std::unique_ptr<Backend>> MakeGpuBackend(int gpus) {
#if defined(LADDER_HAVE_CUDA)
  return NewCudaBackend(LaunchedLocalRank() % gpus);
#else
  (void)gpus;
  return absl::FailedPreconditionError("this build has no CUDA backend");
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view device) {
  if (device == "cpu") return std::make_unique<CpuBackend>();
  if (device == "cuda-sim") return NewCudaSimBackend();
  if (device != "cuda" && device != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("unknown device '", std::string(device),
                                                   "' (expected auto, cpu, cuda or cuda-sim)"));
  }
  std::string why;  // why no GPU is usable
  const int gpus = CudaDeviceCount(&why);
  const bool gpu = gpus > 0;
  if (device == "cuda") {
    if (!gpu) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device cuda: no usable GPU (", why, ")"));
    }
    return MakeGpuBackend(gpus);
  }
  // auto: the GPU where one is usable (every CUDA build has the CUDA backend),
  // else the CPU, said once.
  if (IsFirstLaunchedRank()) {
    std::fprintf(stderr, "ladder: device auto: %s (%s)\n", gpu ? "cuda" : "cpu",
                 gpu ? "a GPU is usable" : why.c_str());
  }
  if (gpu) return MakeGpuBackend(gpus);
  return std::make_unique<CpuBackend>();
}

absl::StatusOr<std::unique_ptr<Communicator>> MakeDeviceCommunicator(const Backend& backend,
                                                                     Communicator& host,
                                                                     double timeout_seconds) {
  if (backend.memory_is_host()) {
    return CreateMpiCommunicator(host.axis(), host.members(), timeout_seconds, backend.device());
  }
#if defined(LADDER_HAVE_CUDA)
  return NewNcclCommunicator(backend, host, timeout_seconds);
#else
  return absl::FailedPreconditionError(
      absl::StrCat("no communicator for ", std::string(backend.name()), "'s memory in this build"));
#endif
}

}  // namespace ladder
