// The rank grid of 3D parallelism: which slice of the work each process owns.
//
// A run of dp * tp * pp processes arranges them as [pp][dp][tp] with tensor
// parallelism innermost:
//
//   rank = (pp_rank * dp + dp_rank) * tp + tp_rank
//
// so the tp ranks of one tensor-parallel group are adjacent. Launchers place
// adjacent ranks on the same node, which keeps the chattiest group (two
// all-reduces per layer, forward and backward) on the fastest links, and puts
// pipeline stages, which only pass activations to a neighbour, across nodes.
//
// Each rank belongs to one group per axis (see Axis): the ranks that differ
// from it only in that axis's coordinate. Everything here is a pure function
// of (shape, rank), so it is unit-tested without MPI.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace ladder {

// The axes along which ranks communicate; one communicator per axis.
enum class Axis {
  kWorld,      // every rank
  kData,       // same (pp, tp), all dp: gradient all-reduce / ZeRO-1
  kTensor,     // same (pp, dp), all tp: Megatron all-reduces
  kPipeline,   // same (dp, tp), all pp: activations to the next stage
  kEmbedding,  // same (dp, tp), first and last stage: the tied embedding's
               // gradient. A rank alone when pp == 1 (both ends are one stage)
               // and for a middle stage (it holds no embedding).
};
inline constexpr int kNumAxes = 5;

// "world", "data", "tensor", "pipeline", "embedding".
const char* AxisName(Axis axis);

struct GridShape {
  int dp = 1, tp = 1, pp = 1;
};

class Grid {
 public:
  // InvalidArgument unless every size is >= 1, dp*tp*pp == world_size
  // ("dp*tp*pp = 8 but the world has 4 ranks") and 0 <= rank < world_size.
  static absl::StatusOr<Grid> Create(GridShape shape, int world_size, int rank);

  const GridShape& shape() const { return shape_; }
  int world_size() const { return shape_.dp * shape_.tp * shape_.pp; }
  int rank() const { return rank_; }

  int dp_size() const { return shape_.dp; }
  int tp_size() const { return shape_.tp; }
  int pp_size() const { return shape_.pp; }
  int dp_rank() const { return dp_rank_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  bool is_first_stage() const { return pp_rank_ == 0; }
  bool is_last_stage() const { return pp_rank_ == shape_.pp - 1; }

  // The world rank at coordinates (pp, dp, tp); each must be in range.
  int RankOf(int pp, int dp, int tp) const;

  // The world ranks of this rank's group on `axis`, in group-rank order
  // (ascending): entry i is the world rank of group rank i, and this rank is
  // at index GroupRank(axis). Every member computes the same list.
  std::vector<int> Members(Axis axis) const;
  // This rank's index in Members(axis): tp_rank for kTensor, dp_rank for
  // kData, pp_rank for kPipeline; for kEmbedding 1 on the last stage when
  // pp > 1, else 0.
  int GroupRank(Axis axis) const;

 private:
  Grid(GridShape shape, int rank);

  GridShape shape_;
  int rank_;
  int dp_rank_, tp_rank_, pp_rank_;
};

}  // namespace ladder
