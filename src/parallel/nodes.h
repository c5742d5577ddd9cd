// Which node a rank runs on. Ranks are placed on nodes in blocks (mpirun's
// default by-slot mapping): node of rank r = r / K, with K the ranks per
// node. K is LADDER_RANKS_PER_NODE when set (one machine then simulates
// nodes of K ranks each, as the recovery tests do), else Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, else 1. Thread-safe: reads the environment only.
#pragma once

#include "absl/status/statusor.h"

namespace ladder {

// K above; InvalidArgument naming LADDER_RANKS_PER_NODE when it is not a
// positive integer.
absl::StatusOr<int> RanksPerNode();

}  // namespace ladder
