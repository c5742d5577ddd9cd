#include "src/train/adamw.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<AdamW> AdamW::Create(const ParameterTable* table, Backend* backend,
                                    const AdamWConfig& cfg, int64_t begin, int64_t end,
                                    Communicator* tp, Communicator* pp) {
  if (begin < 0 || end < begin) {
    return absl::InvalidArgumentError(absl::StrCat("bad optimizer range [", begin, ", ", end, ")"));
  }
  AdamW opt(table, backend, cfg, begin, end, tp, pp);
  const size_t bytes = static_cast<size_t>(end - begin) * sizeof(float);
  ASSIGN_OR_RETURN(opt.m_, backend->Allocate(bytes));
  ASSIGN_OR_RETURN(opt.v_, backend->Allocate(bytes));
  return opt;
}

int64_t AdamW::state_bytes() const { return 2 * (end_ - begin_) * int64_t{sizeof(float)}; }

template <typename F>
absl::Status AdamW::ForEachSegment(F f) const {
  for (int i = 0; i < table_->size(); ++i) {
    const int64_t lo = std::max(begin_, table_->offset(i));
    const int64_t hi = std::min(end_, table_->offset(i) + table_->numel(i));
    if (lo < hi) RETURN_IF_ERROR(f(i, lo - begin_, hi - lo));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> AdamW::GradNorm(Tensor grads, Communicator* range_group) const {
  const bool tp_split = tp_ != nullptr && tp_->size() > 1;
  const bool pp_split = pp_ != nullptr && pp_->size() > 1;
  const bool ranged = range_group != nullptr && range_group->size() > 1;
  if (!tp_split && !pp_split && !ranged) {
    double sum = 0.0;
    RETURN_IF_ERROR(backend_->SumOfSquares(grads, &sum));
    return std::sqrt(sum);
  }
  double split = 0.0, replicated = 0.0;
  RETURN_IF_ERROR(ForEachSegment([&](int i, int64_t first, int64_t count) -> absl::Status {
    if (table_->IsTiedCopy(i)) return absl::OkStatus();
    double s = 0.0;
    RETURN_IF_ERROR(backend_->SumOfSquares(Tensor::F32(grads.f32() + first, {count}), &s));
    (table_->spec(i).split == TpSplit::kReplicated ? replicated : split) += s;
    return absl::OkStatus();
  }));
  // Every TP rank holds the replicated tensors whole, so only the split sum
  // is summed over the TP group; ranges and stages hold disjoint parts.
  float sums[2] = {static_cast<float>(split), static_cast<float>(replicated)};
  if (ranged) RETURN_IF_ERROR(range_group->AllReduce(Tensor::F32(sums, {2}), ReduceOp::kSum));
  if (pp_split) RETURN_IF_ERROR(pp_->AllReduce(Tensor::F32(sums, {2}), ReduceOp::kSum));
  if (tp_split) RETURN_IF_ERROR(tp_->AllReduce(Tensor::F32(sums, {1}), ReduceOp::kSum));
  return std::sqrt(static_cast<double>(sums[0]) + sums[1]);
}

absl::Status AdamW::Update(Tensor weights, Tensor grads, double grad_norm, double lr, int step) {
  AdamWParams p;
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(cfg_.beta1);
  p.beta2 = static_cast<float>(cfg_.beta2);
  p.eps = static_cast<float>(cfg_.eps);
  p.step = step;
  p.grad_scale = 1.0f;
  if (cfg_.grad_clip > 0 && grad_norm > cfg_.grad_clip) {
    p.grad_scale = static_cast<float>(cfg_.grad_clip / grad_norm);
  }
  float* m = static_cast<float*>(m_.get());
  float* v = static_cast<float*>(v_.get());
  return ForEachSegment([&](int i, int64_t first, int64_t count) {
    p.weight_decay = table_->spec(i).weight_decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    auto at = [&](float* base) { return Tensor::F32(base + first, {count}); };
    return backend_->AdamWUpdate(at(weights.f32()), at(grads.f32()), at(m), at(v), p);
  });
}

}  // namespace ladder
