// ladder version: the build and the backends this binary can use here.
#include <cblas.h>
#include <omp.h>

#include <cstdio>

#include "src/backend/cuda/cuda_device.h"
#include "src/cli/commands.h"
#include "src/core/flags.h"

namespace ladder {

int VersionCommand(int argc, char** argv) {
  FlagSet flags("ladder version", "Print the version and the compiled backends.");
  return RunCommand(flags, argc, argv, [] {
    static const char* kParallel[] = {"sequential", "pthreads", "OpenMP"};
    const int parallel = openblas_get_parallel();
    std::printf("ladder %s (C++20)\n", LADDER_VERSION);
    std::printf("cpu: OpenBLAS %s, %s threading, %d OpenMP threads\n", openblas_get_config(),
                parallel >= 0 && parallel <= 2 ? kParallel[parallel] : "unknown",
                omp_get_max_threads());
    std::printf("%s\n", CudaSummary().c_str());
    return absl::OkStatus();
  });
}

}  // namespace ladder
