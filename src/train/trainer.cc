#include "src/train/trainer.h"

#include <cmath>

#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/train/lr_schedule.h"

namespace ladder {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const RunConfig& cfg, Backend* backend,
                                                         const std::vector<int32_t>* train,
                                                         const std::vector<int32_t>* val,
                                                         double peak_gflops, TrainerGroups groups) {
  RETURN_IF_ERROR(cfg.Validate());
  std::unique_ptr<Trainer> t(new Trainer(cfg, peak_gflops, groups));
  if (cfg.batch_size % t->dp_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size (", cfg.batch_size, ") is not divisible by dp (", t->dp_size(), ")"));
  }
  const bool zero = groups.zero1 && t->dp_size() > 1;
  // ZeRO-1 cuts the flat buffers into D equal, 64-byte aligned shards.
  ASSIGN_OR_RETURN(t->model_, Gpt::Create(cfg.model, backend, t->micro_rows(), /*training=*/true,
                                          groups.tp, zero ? 16 * t->dp_size() : 1));
  RETURN_IF_ERROR(t->model_->InitWeights(cfg.seed));
  AdamWConfig opt;
  opt.beta1 = cfg.beta1;
  opt.beta2 = cfg.beta2;
  opt.eps = cfg.eps;
  opt.weight_decay = cfg.weight_decay;
  opt.grad_clip = cfg.grad_clip;
  int64_t begin = 0, end = t->model_->table().total_floats();
  if (zero) {
    t->shard_floats_ = t->model_->buffer_floats() / t->dp_size();
    begin = t->dp_rank() * t->shard_floats_;
    end = begin + t->shard_floats_;
    ASSIGN_OR_RETURN(t->grad_shard_,
                     backend->Allocate(static_cast<size_t>(t->shard_floats_) * sizeof(float)));
  }
  ASSIGN_OR_RETURN(AdamW adamw,
                   AdamW::Create(&t->model_->table(), backend, opt, begin, end, groups.tp));
  t->optimizer_.emplace(std::move(adamw));
  ASSIGN_OR_RETURN(DataLoader tl, DataLoader::Create(*train, cfg.model.context, cfg.seed));
  ASSIGN_OR_RETURN(DataLoader vl, DataLoader::Create(*val, cfg.model.context, cfg.seed));
  t->train_loader_.emplace(std::move(tl));
  t->val_loader_.emplace(std::move(vl));
  // This rank's rows of one global batch.
  const size_t n = static_cast<size_t>(cfg.batch_size) / t->dp_size() * cfg.AccumulationSteps() *
                   cfg.model.context;
  t->inputs_.resize(n);
  t->targets_.resize(n);
  return t;
}

int64_t Trainer::tokens_per_step() const {
  return int64_t{cfg_.batch_size} * cfg_.model.context * cfg_.AccumulationSteps();
}

absl::StatusOr<StepRecord> Trainer::Step() {
  const int T = cfg_.model.context, A = cfg_.AccumulationSteps(), D = dp_size();
  const int G = cfg_.batch_size * A, rows = micro_rows();
  StepRecord r;
  Timer step_timer;
  for (Communicator* c : {groups_.tp, groups_.dp}) {
    if (c != nullptr) c->ResetStats();
  }
  RETURN_IF_ERROR(model_->ZeroGrads());
  Timer t;
  train_loader_->Next(G, dp_rank() * (G / D), G / D, inputs_.data(), targets_.data());
  r.t_data = t.Seconds();
  const float dloss = 1.0f / static_cast<float>(int64_t{G} * T);
  double loss_sum = 0.0;
  for (int micro = 0; micro < A; ++micro) {
    const size_t at = static_cast<size_t>(micro) * rows * T;
    t.Reset();
    ASSIGN_OR_RETURN(double loss,
                     model_->Forward(inputs_.data() + at, targets_.data() + at, rows, T));
    loss_sum += loss;
    r.t_forward += t.Seconds();
    t.Reset();
    RETURN_IF_ERROR(model_->Backward(dloss));
    r.t_backward += t.Seconds();
  }
  r.loss = loss_sum / A;
  t.Reset();
  Tensor weights = model_->weights(), grads = model_->grads();
  Communicator* range_group = nullptr;
  if (D > 1) {
    // The mean loss over the global batch, and the summed gradient of all rows.
    float loss = static_cast<float>(r.loss);
    RETURN_IF_ERROR(groups_.dp->AllReduce(Tensor::F32(&loss, {1}), ReduceOp::kSum));
    r.loss = static_cast<double>(loss) / D;
    if (shard_floats_ > 0) {
      // ZeRO-1: each rank receives the sum of its shard only.
      grads = Tensor::F32(static_cast<float*>(grad_shard_.get()), {shard_floats_});
      weights =
          Tensor::F32(model_->weight_buffer().f32() + dp_rank() * shard_floats_, {shard_floats_});
      RETURN_IF_ERROR(groups_.dp->ReduceScatter(model_->grad_buffer(), grads));
      range_group = groups_.dp;
    } else {
      RETURN_IF_ERROR(groups_.dp->AllReduce(grads, ReduceOp::kSum));
    }
  }
  ASSIGN_OR_RETURN(r.grad_norm, optimizer_->GradNorm(grads, range_group));
  r.lr = LearningRate(step_, cfg_.steps, cfg_.warmup_steps, cfg_.lr, cfg_.min_lr);
  RETURN_IF_ERROR(
      optimizer_->Update(weights, grads, r.grad_norm, r.lr, static_cast<int>(step_ + 1)));
  if (range_group != nullptr) {
    // Every rank gets every updated shard back (in place: its own block).
    RETURN_IF_ERROR(groups_.dp->AllGather(weights, model_->weight_buffer()));
  }
  r.t_optimizer = t.Seconds();
  r.t_step = step_timer.Seconds();
  for (Communicator* c : {groups_.tp, groups_.dp}) {
    if (c != nullptr && c->size() > 1) {
      r.comm.push_back({AxisName(c->axis()), c->stats().seconds, c->stats().bytes});
    }
  }
  ++step_;
  r.step = step_;
  r.tokens_per_s = static_cast<double>(tokens_per_step()) / r.t_step;
  if (peak_gflops_ > 0) {
    r.mfu = r.tokens_per_s * cfg_.model.TrainingFlopsPerToken() / (peak_gflops_ * 1e9);
  }
  return r;
}

absl::StatusOr<double> Trainer::ValidationLoss() {
  // The same windows whatever the layout: eval_batches x batch_size of them,
  // in micro-batches that fit the arena (every DP rank scores all of them).
  const int T = cfg_.model.context, rows = micro_rows();
  const int64_t windows = cfg_.eval_batches * cfg_.batch_size;
  double sum = 0.0;
  for (int64_t w = 0; w < windows; w += rows) {
    val_loader_->ReadSequential(static_cast<uint64_t>(w), rows, inputs_.data(), targets_.data());
    ASSIGN_OR_RETURN(double loss, model_->Forward(inputs_.data(), targets_.data(), rows, T));
    sum += loss * rows;
  }
  return sum / static_cast<double>(windows);
}

absl::Status Trainer::Run(const std::function<absl::Status(const StepRecord&)>& on_step) {
  while (step_ < cfg_.steps) {
    ASSIGN_OR_RETURN(StepRecord r, Step());
    const bool eval_now =
        (cfg_.eval_every > 0 && r.step % cfg_.eval_every == 0) || r.step == cfg_.steps;
    if (eval_now) {
      ASSIGN_OR_RETURN(double v, ValidationLoss());
      r.val_loss = v;
    }
    if (on_step) RETURN_IF_ERROR(on_step(r));
  }
  return absl::OkStatus();
}

}  // namespace ladder
