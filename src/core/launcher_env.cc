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

}  // namespace ladder
