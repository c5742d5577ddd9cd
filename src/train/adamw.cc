#include "src/train/adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<AdamW> AdamW::Create(const ParameterTable* table, Backend* backend,
                                    const AdamWConfig& cfg, int64_t begin, int64_t end,
                                    Communicator* tp, Communicator* pp, Backend* state) {
  if (begin < 0 || end < begin) {
    return absl::InvalidArgumentError(absl::StrCat("bad optimizer range [", begin, ", ", end, ")"));
  }
  if (state == nullptr) state = backend;
  AdamW opt(table, backend, state, cfg, begin, end, tp, pp);
  const size_t bytes = static_cast<size_t>(end - begin) * sizeof(float);
  ASSIGN_OR_RETURN(opt.m_, state->Allocate(bytes));
  ASSIGN_OR_RETURN(opt.v_, state->Allocate(bytes));
  ASSIGN_OR_RETURN(opt.sums_,
                   backend->Allocate(static_cast<size_t>(table->size()) * sizeof(float)));
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

absl::StatusOr<double> AdamW::GradNorm(Tensor grads, Communicator* range_group) {
  const bool tp_split = tp_ != nullptr && tp_->size() > 1;
  const bool pp_split = pp_ != nullptr && pp_->size() > 1;
  const bool ranged = range_group != nullptr && range_group->size() > 1;
  // Slot k: the sum of squares of the k-th segment counted, tensor_of[k] its
  // tensor. The last stage's copy of the tied embedding is the first
  // stage's, counted there.
  const Tensor slots =
      Tensor::F32(static_cast<float*>(sums_.get()), {table_->size()}, backend_->device());
  std::vector<int> tensor_of;
  RETURN_IF_ERROR(ForEachSegment([&](int i, int64_t first, int64_t count) -> absl::Status {
    if (table_->IsTiedCopy(i)) return absl::OkStatus();
    const int64_t k = static_cast<int64_t>(tensor_of.size());
    tensor_of.push_back(i);
    return backend_->SumOfSquares(grads.Slice(first, {count}), slots.Slice(k, {1}));
  }));
  const int64_t counted = static_cast<int64_t>(tensor_of.size());
  std::vector<float> host(tensor_of.size());
  if (counted > 0) RETURN_IF_ERROR(backend_->CopyToHost(host.data(), slots.Slice(0, {counted})));
  double split = 0.0, replicated = 0.0;
  for (int64_t k = 0; k < counted; ++k) {
    (table_->spec(tensor_of[k]).split == TpSplit::kReplicated ? replicated : split) += host[k];
  }
  if (!tp_split && !pp_split && !ranged) return std::sqrt(split + replicated);
  // Every TP rank holds the replicated tensors whole, so only the split sum
  // is summed over the TP group; ranges and stages hold disjoint parts.
  float sums[2] = {static_cast<float>(split), static_cast<float>(replicated)};
  const Tensor both = Tensor::F32(sums, {2}, Device::kCpu);
  if (ranged) RETURN_IF_ERROR(range_group->AllReduce(both, ReduceOp::kSum));
  if (pp_split) RETURN_IF_ERROR(pp_->AllReduce(both, ReduceOp::kSum));
  if (tp_split) RETURN_IF_ERROR(tp_->AllReduce(both.Slice(0, {1}), ReduceOp::kSum));
  return std::sqrt(static_cast<double>(sums[0]) + sums[1]);
}

absl::Status AdamW::Update(Tensor weights, Tensor grads, double grad_norm, double lr, int step,
                           Tensor copy, uint64_t round_seed) {
  AdamWParams p;
  p.round_seed = round_seed;
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(cfg_.beta1);
  p.beta2 = static_cast<float>(cfg_.beta2);
  p.eps = static_cast<float>(cfg_.eps);
  p.step = step;
  p.grad_scale = 1.0f;
  if (cfg_.grad_clip > 0 && grad_norm > cfg_.grad_clip) {
    p.grad_scale = static_cast<float>(cfg_.grad_clip / grad_norm);
  }
  // Every segment in one call (one launch on a GPU).
  const Tensor m = moment_m(), v = moment_v();
  std::vector<AdamWTensor> tensors;
  RETURN_IF_ERROR(ForEachSegment([&](int i, int64_t first, int64_t count) {
    auto at = [&](const Tensor& t) { return t.Slice(first, {count}); };
    const float decay = table_->spec(i).weight_decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    const int64_t index = begin_ + first - table_->offset(i);  // of the segment's first element
    tensors.push_back({at(weights), at(grads), at(m), at(v), decay,
                       copy.empty() ? Tensor() : at(copy), table_->RoundingOffset(i, index)});
    return absl::OkStatus();
  }));
  return state_->AdamWUpdate(tensors, p);
}

}  // namespace ladder
