// Rank <-> (pp, dp, cp, tp) arithmetic and the member lists of each axis group.
#include "src/parallel/grid.h"

#include <cassert>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace ladder {

const char* AxisName(Axis axis) {
  switch (axis) {
    case Axis::kWorld:
      return "world";
    case Axis::kData:
      return "data";
    case Axis::kTensor:
      return "tensor";
    case Axis::kPipeline:
      return "pipeline";
    case Axis::kEmbedding:
      return "embedding";
    case Axis::kContext:
      return "context";
  }
  return "unknown";
}

std::string LayoutName(const GridShape& s) {
  return s.cp > 1 ? absl::StrCat("dp ", s.dp, " x cp ", s.cp, " x tp ", s.tp, " x pp ", s.pp)
                  : absl::StrCat("dp ", s.dp, " x tp ", s.tp, " x pp ", s.pp);
}

absl::StatusOr<Grid> Grid::Create(GridShape shape, int world_size, int rank) {
  const struct {
    const char* name;
    int size;
  } sizes[] = {{"dp", shape.dp}, {"tp", shape.tp}, {"pp", shape.pp}, {"cp", shape.cp}};
  for (const auto& s : sizes) {
    if (s.size < 1) {
      return absl::InvalidArgumentError(absl::StrCat(s.name, " must be at least 1, got ", s.size));
    }
  }
  // 64-bit product: absurd sizes must not overflow into a match.
  const int64_t product = int64_t{shape.dp} * shape.cp * shape.tp * shape.pp;
  if (product != world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(shape.cp > 1 ? "dp*cp*tp*pp = " : "dp*tp*pp = ", product,
                     " but the world has ", world_size, " ranks"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside a world of ", world_size, " ranks"));
  }
  return Grid(shape, rank);
}

Grid::Grid(GridShape shape, int rank)
    : shape_(shape),
      rank_(rank),
      dp_rank_(rank / (shape.tp * shape.cp) % shape.dp),
      cp_rank_(rank / shape.tp % shape.cp),
      tp_rank_(rank % shape.tp),
      pp_rank_(rank / (shape.tp * shape.cp * shape.dp)) {}

int Grid::RankOf(int pp, int dp, int tp, int cp) const {
  assert(pp >= 0 && pp < shape_.pp && dp >= 0 && dp < shape_.dp && tp >= 0 && tp < shape_.tp &&
         cp >= 0 && cp < shape_.cp);
  return ((pp * shape_.dp + dp) * shape_.cp + cp) * shape_.tp + tp;
}

std::vector<int> Grid::Members(Axis axis) const {
  std::vector<int> m;
  switch (axis) {
    case Axis::kWorld:
      for (int r = 0; r < world_size(); ++r) m.push_back(r);
      break;
    case Axis::kData:
      for (int d = 0; d < shape_.dp; ++d) {
        for (int c = 0; c < shape_.cp; ++c) m.push_back(RankOf(pp_rank_, d, tp_rank_, c));
      }
      break;
    case Axis::kTensor:
      for (int t = 0; t < shape_.tp; ++t) m.push_back(RankOf(pp_rank_, dp_rank_, t, cp_rank_));
      break;
    case Axis::kPipeline:
      for (int p = 0; p < shape_.pp; ++p) m.push_back(RankOf(p, dp_rank_, tp_rank_, cp_rank_));
      break;
    case Axis::kEmbedding:
      if (!is_first_stage() && !is_last_stage()) {
        m.push_back(rank_);  // a middle stage holds no embedding: alone
        break;
      }
      m.push_back(RankOf(0, dp_rank_, tp_rank_, cp_rank_));
      if (shape_.pp > 1) m.push_back(RankOf(shape_.pp - 1, dp_rank_, tp_rank_, cp_rank_));
      break;
    case Axis::kContext:
      for (int c = 0; c < shape_.cp; ++c) m.push_back(RankOf(pp_rank_, dp_rank_, tp_rank_, c));
      break;
  }
  return m;
}

int Grid::GroupRank(Axis axis) const {
  switch (axis) {
    case Axis::kWorld:
      return rank_;
    case Axis::kData:
      return dp_rank_ * shape_.cp + cp_rank_;
    case Axis::kTensor:
      return tp_rank_;
    case Axis::kPipeline:
      return pp_rank_;
    case Axis::kEmbedding:
      return is_last_stage() && shape_.pp > 1 ? 1 : 0;
    case Axis::kContext:
      return cp_rank_;
  }
  return 0;
}

}  // namespace ladder
