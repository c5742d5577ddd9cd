#include "src/core/launcher_env.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace ladder {

bool IsFirstLaunchedRank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* rank = std::getenv(name);
    if (rank != nullptr) return std::strcmp(rank, "0") == 0;
  }
  return true;
}

int LaunchedLocalRank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* rank = std::getenv(name);
    if (rank == nullptr) continue;
    char* end = nullptr;
    const long value = std::strtol(rank, &end, 10);
    if (end != rank && *end == '\0' && value >= 0 && value < (1 << 20)) {
      return static_cast<int>(value);
    }
  }
  return 0;
}

}  // namespace ladder
