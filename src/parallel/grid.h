// The rank grid of 4D parallelism: which slice of the work each process owns.
//
// A run of dp * cp * tp * pp processes arranges them as [pp][dp][cp][tp]
// with tensor parallelism innermost and context parallelism next to it:
//
//   rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank
//
// so the tp ranks of one tensor-parallel group are adjacent, and the cp
// groups of such groups follow. Launchers place adjacent ranks on the same
// node: the chattiest groups (tensor: two all-reduces per layer, forward
// and backward; context: every layer's keys and values around a ring) stay
// on the fastest links, and pipeline stages, which only pass activations
// to a neighbour, go across nodes.
//
// Each rank belongs to one group per axis (see Axis): the ranks that differ
// from it only in that axis's coordinates. Everything here is a pure
// function of (shape, rank), so it is unit-tested without MPI.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ladder {

// The axes along which ranks communicate; one communicator per axis.
enum class Axis {
  kWorld,      // every rank
  kData,       // same (pp, tp), all (dp, cp): every rank holding the same
               // weights; gradient all-reduce / ZeRO-1
  kTensor,     // same (pp, dp, cp), all tp: Megatron all-reduces
  kPipeline,   // same (dp, cp, tp), all pp: activations to the next stage
  kEmbedding,  // same (dp, cp, tp), first and last stage: the tied embedding's
               // gradient. A rank alone when pp == 1 (both ends are one stage)
               // and for a middle stage (it holds no embedding).
  kContext,    // same (pp, dp, tp), all cp: ring attention's keys and values
};
inline constexpr int kNumAxes = 6;
// Every axis, in the order communicators are built (the same on every rank).
inline constexpr Axis kAllAxes[kNumAxes] = {Axis::kWorld,    Axis::kTensor,    Axis::kData,
                                            Axis::kPipeline, Axis::kEmbedding, Axis::kContext};

// "world", "data", "tensor", "pipeline", "embedding", "context".
const char* AxisName(Axis axis);

struct GridShape {
  int dp = 1, tp = 1, pp = 1;
  int cp = 1;  // context parallelism
};
// "dp 2 x tp 2 x pp 2", or with context parallelism "dp 2 x cp 2 x tp 2 x pp 2".
std::string LayoutName(const GridShape& shape);

class Grid {
 public:
  // InvalidArgument unless every size is >= 1, dp*cp*tp*pp == world_size
  // ("dp*cp*tp*pp = 8 but the world has 4 ranks") and 0 <= rank < world_size.
  static absl::StatusOr<Grid> Create(GridShape shape, int world_size, int rank);

  const GridShape& shape() const { return shape_; }
  int world_size() const { return shape_.dp * shape_.cp * shape_.tp * shape_.pp; }
  int rank() const { return rank_; }

  int dp_size() const { return shape_.dp; }
  int cp_size() const { return shape_.cp; }
  int tp_size() const { return shape_.tp; }
  int pp_size() const { return shape_.pp; }
  int dp_rank() const { return dp_rank_; }
  int cp_rank() const { return cp_rank_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  bool is_first_stage() const { return pp_rank_ == 0; }
  bool is_last_stage() const { return pp_rank_ == shape_.pp - 1; }

  // The world rank at coordinates (pp, dp, tp, cp); each must be in range
  // (cp last, so a layout without context parallelism names three).
  int RankOf(int pp, int dp, int tp, int cp = 0) const;

  // The world ranks of this rank's group on `axis`, in group-rank order
  // (ascending): entry i is the world rank of group rank i, and this rank is
  // at index GroupRank(axis). Every member computes the same list.
  std::vector<int> Members(Axis axis) const;
  // This rank's index in Members(axis): tp_rank for kTensor, dp_rank * cp +
  // cp_rank for kData, pp_rank for kPipeline, cp_rank for kContext; for
  // kEmbedding 1 on the last stage when pp > 1, else 0.
  int GroupRank(Axis axis) const;

 private:
  Grid(GridShape shape, int rank);

  GridShape shape_;
  int rank_;
  int dp_rank_, cp_rank_, tp_rank_, pp_rank_;
};

}  // namespace ladder
