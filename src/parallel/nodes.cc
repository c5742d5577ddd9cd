#include "src/parallel/nodes.h"

#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {
namespace {

// The variable that sets K, or nullptr when none does.
const char* RanksPerNodeVariable() {
  for (const char* name : {"LADDER_RANKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != 0) return name;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<int> RanksPerNode() {
  const char* name = RanksPerNodeVariable();
  if (name == nullptr) return 1;
  const std::string value = std::getenv(name);
  int k = 0;
  if (!absl::SimpleAtoi(value, &k) || k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " must be a positive integer, got '", value, "'"));
  }
  return k;
}

absl::StatusOr<NodeMap> NodeMapFromEnv(int world) {
  ASSIGN_OR_RETURN(const int k, RanksPerNode());
  if (world % k != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(RanksPerNodeVariable(), "=", k, " must divide the world's ", world, " ranks"));
  }
  return NodeMap{.world = world, .ranks_per_node = k};
}

}  // namespace ladder
