#include "src/parallel/nodes.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ladder {

absl::StatusOr<int> RanksPerNode() {
  for (const char* name : {"LADDER_RANKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == 0) continue;
    int k = 0;
    if (!absl::SimpleAtoi(value, &k) || k < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " must be a positive integer, got '", std::string(value), "'"));
    }
    return k;
  }
  return 1;
}

}  // namespace ladder
