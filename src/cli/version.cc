// ladder version: the build and the backends this binary can use here.
#include <cblas.h>
#include <omp.h>

#include <cstdio>

#include "src/backend/cpu/blas_kernels.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cuda/cuda_device.h"
#include "src/cli/commands.h"
#include "src/core/flags.h"

namespace ladder {

int VersionCommand(int argc, char** argv) {
  FlagSet flags("ladder version", "Print the version and the compiled backends.");
  return RunCommand(flags, argc, argv, [] {
    std::printf("ladder %s (C++20)\n", LADDER_VERSION);
    std::printf("cpu: %d OpenMP threads, ladder kernels %s (this CPU supports %s)\n",
                omp_get_max_threads(), CpuIsaName(ActiveCpuIsa()), CpuIsaName(SupportedCpuIsa()));
    std::printf("blas: %s\n", BlasSummary().c_str());
    std::printf("blas config: %s\n", openblas_get_config());
    std::printf("%s\n", CudaSummary().c_str());
    return absl::OkStatus();
  });
}

}  // namespace ladder
