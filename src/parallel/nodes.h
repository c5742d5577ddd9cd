// Which node a rank runs on. Ranks are placed on nodes in blocks (mpirun's
// default by-slot mapping): world rank r is on node r / K, local index
// r % K, with K the ranks per node: LADDER_RANKS_PER_NODE when set (one
// machine then simulates nodes of K ranks each, as the recovery tests do),
// else Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, else 1. Rank r's ring
// neighbour is the rank with the same local index on node (node + 1) mod
// nodes (it keeps r's memory checkpoint replica,
// src/checkpoint/memory_checkpoint.h). Thread-safe: reads the environment
// only.
#pragma once

#include "absl/status/statusor.h"

namespace ladder {

// K above; InvalidArgument naming the variable when it is not a positive
// integer.
absl::StatusOr<int> RanksPerNode();

// Which node each rank of a world is on (the rule above).
struct NodeMap {
  int world = 1, ranks_per_node = 1;
  int nodes() const { return world / ranks_per_node; }
  int node(int rank) const { return rank / ranks_per_node; }
  // Whether `rank` is its node's local rank 0.
  bool leads(int rank) const { return rank % ranks_per_node == 0; }
  // The rank keeping `rank`'s replica, and the one whose replica `rank` keeps.
  int successor(int rank) const { return (rank + ranks_per_node) % world; }
  int predecessor(int rank) const { return (rank - ranks_per_node + world) % world; }
};

// The map of a world of `world` ranks from the environment; InvalidArgument
// naming the variable when K is not a positive divisor of the world.
absl::StatusOr<NodeMap> NodeMapFromEnv(int world);

}  // namespace ladder
