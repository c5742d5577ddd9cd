#include "src/train/adamw.h"

#include <cmath>

#include "src/core/status.h"

namespace ladder {

absl::StatusOr<AdamW> AdamW::Create(const ParameterTable* table, Backend* backend,
                                    const AdamWConfig& cfg, Communicator* tp) {
  AdamW opt(table, backend, cfg, tp);
  const size_t bytes = static_cast<size_t>(table->total_floats()) * sizeof(float);
  ASSIGN_OR_RETURN(opt.m_, backend->Allocate(bytes));
  ASSIGN_OR_RETURN(opt.v_, backend->Allocate(bytes));
  return opt;
}

int64_t AdamW::state_bytes() const { return 2 * table_->total_floats() * int64_t{sizeof(float)}; }

absl::StatusOr<double> AdamW::GradNorm(Tensor grads) const {
  const bool sharded = tp_ != nullptr && tp_->size() > 1;
  if (!sharded) {
    double sum = 0.0;
    RETURN_IF_ERROR(backend_->SumOfSquares(grads, &sum));
    return std::sqrt(sum);
  }
  double split = 0.0, replicated = 0.0;
  for (int i = 0; i < table_->size(); ++i) {
    double s = 0.0;
    RETURN_IF_ERROR(backend_->SumOfSquares(table_->View(grads.f32(), i), &s));
    (table_->spec(i).split == TpSplit::kReplicated ? replicated : split) += s;
  }
  float split_all = static_cast<float>(split);
  RETURN_IF_ERROR(tp_->AllReduce(Tensor::F32(&split_all, {1}), ReduceOp::kSum));
  return std::sqrt(static_cast<double>(split_all) + replicated);
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
  for (int i = 0; i < table_->size(); ++i) {
    p.weight_decay = table_->spec(i).weight_decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    RETURN_IF_ERROR(backend_->AdamWUpdate(table_->View(weights.f32(), i),
                                          table_->View(grads.f32(), i), table_->View(m, i),
                                          table_->View(v, i), p));
  }
  return absl::OkStatus();
}

}  // namespace ladder
