#include "src/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/core/trace.h"
#include "src/parallel/context_parallel/ring_attention.h"
#include "src/train/lr_schedule.h"

namespace ladder {
namespace {

bool Parallel(const Communicator* c) { return c != nullptr && c->size() > 1; }

// The seconds from `begin` to `end` (NowNanos readings), recorded as a span
// of the step track while a trace records.
double StepSpan(const char* name, int64_t begin, int64_t end) {
  TraceInterval(TraceTrack::kStep, name, name, begin, end);
  return static_cast<double>(end - begin) * 1e-9;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const RunConfig& cfg, Backend* backend,
                                                         const std::vector<int32_t>* train,
                                                         const std::vector<int32_t>* val,
                                                         double peak_gflops,
                                                         TrainerOptions groups) {
  RETURN_IF_ERROR(cfg.Validate());
  std::unique_ptr<Trainer> t(new Trainer(cfg, peak_gflops, groups));
  t->guard_ = StepGuard(groups.guard);
  const int D = t->replicas(), P = t->pp_size(), A = cfg.AccumulationSteps();
  const int64_t G = int64_t{cfg.batch_size} * A;
  t->microbatches_ = groups.microbatches > 0 ? groups.microbatches : A;
  if (G % (int64_t{D} * t->microbatches_) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the global batch of ", G, " sequences (batch_size ", cfg.batch_size, " x ", A,
                     " accumulation steps) does not split into dp (", D, ") x microbatches (",
                     t->microbatches_, ") equal parts"));
  }
  if (cfg.model.n_layer < P) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_layer (", cfg.model.n_layer, ") is smaller than pp (", P, ")"));
  }
  if (t->local() && (groups.zero1 || t->cp_size() > 1 || groups.offload != Offload::kNone)) {
    return absl::InvalidArgumentError(
        "--local-sgd needs every replica to hold its whole optimizer state and gradient: not "
        "with --zero 1, --cp or --offload");
  }
  if (groups.overlap_grad_reduce && (groups.zero1 || groups.sequence_parallel ||
                                     groups.local_sgd > 1 || groups.offload == Offload::kParams)) {
    return absl::InvalidArgumentError(
        "--overlap-grad-reduce overlaps the bucketed all-reduce: not with --zero 1 (one "
        "reduce-scatter), --sp (LayerNorm gradients summed after the backward), --local-sgd or "
        "--offload params");
  }
  if (groups.overlap_p2p && P > 1 && !groups.pp->StartsPointToPoint()) {
    return absl::InvalidArgumentError(
        "--overlap-p2p-comm: the pipeline group's communicator does not start sends and "
        "receives (MPI does; NCCL does not yet)");
  }
  t->micro_rows_ = static_cast<int>(G / (int64_t{D} * t->microbatches_));
  const int stage = groups.pp ? groups.pp->rank() : 0;
  t->slots_ = pp::ActivationSlots(groups.schedule, P, stage, t->microbatches_);
  // ZeRO-1 shards over the whole data group (replicas and ring ranks).
  const int shards = t->dp_size();
  const bool zero = groups.zero1 && shards > 1;
  GptParallel par;
  par.tp = groups.tp;
  par.pp = groups.pp;
  par.cp = groups.cp;
  par.slots = t->slots_;
  par.recompute = groups.recompute;
  par.sequence_parallel = groups.sequence_parallel;
  par.storage = groups.storage;
  // ZeRO-1 cuts the flat buffers into equal, 64-byte aligned shards.
  par.buffer_multiple = zero ? 16 * shards : 1;
  // Optimizer offload: the masters and moments in host memory, which a CPU
  // backend allocates (and runs the update in).
  if (groups.offload != Offload::kNone) {
    ASSIGN_OR_RETURN(t->host_, OptimizerOffload::MakeHostBackend(*backend));
    par.master_host = t->host_.get();
    par.offload_params = groups.offload == Offload::kParams;
  }
  // Under parameter offload the gradients are on the host: their norm and
  // reductions run there too.
  Backend* grads_home = groups.offload == Offload::kParams ? t->host_.get() : backend;
  ASSIGN_OR_RETURN(t->model_,
                   Gpt::Create(cfg.model, backend, t->micro_rows_, /*training=*/true, par));
  RETURN_IF_ERROR(t->model_->InitWeights(cfg.seed));
  if (groups.cuda_graph) {
    const absl::Status graphs = t->model_->UseGraphs(true);
    if (!graphs.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--cuda-graph: ", graphs.message()));
    }
  }
  AdamWConfig opt;
  opt.beta1 = cfg.beta1;
  opt.beta2 = cfg.beta2;
  opt.eps = cfg.eps;
  opt.weight_decay = cfg.weight_decay;
  opt.grad_clip = cfg.grad_clip;
  int64_t begin = 0, end = t->model_->table().total_floats();
  if (zero) {
    t->shard_floats_ = t->model_->buffer_floats() / shards;
    begin = t->dp_rank() * t->shard_floats_;
    end = begin + t->shard_floats_;
    ASSIGN_OR_RETURN(t->grad_shard_,
                     grads_home->Allocate(static_cast<size_t>(t->shard_floats_) * sizeof(float)));
  }
  if (groups.offload == Offload::kOptimizer) {
    ASSIGN_OR_RETURN(t->offload_,
                     OptimizerOffload::Create(backend, t->host_.get(), end - begin,
                                              t->model_->buffer_floats(), groups.storage));
  }
  ASSIGN_OR_RETURN(AdamW adamw, AdamW::Create(&t->model_->table(), grads_home, opt, begin, end,
                                              groups.tp, groups.pp, t->host_.get()));
  t->optimizer_.emplace(std::move(adamw));
  if (t->dp_size() > 1 && !zero && !t->local()) {
    t->buckets_ = std::make_unique<dp::GradientBuckets>(
        groups.dp, t->model_->grads(), groups.bucket_floats, groups.overlap_grad_reduce);
  }
  ASSIGN_OR_RETURN(DataLoader tl, DataLoader::Create(*train, cfg.model.context, cfg.seed));
  ASSIGN_OR_RETURN(DataLoader vl, DataLoader::Create(*val, cfg.model.context, cfg.seed));
  t->train_batches_ = std::make_unique<BatchReader>(
      std::move(tl), static_cast<int>(G), static_cast<int>(t->replica() * (G / D)),
      static_cast<int>(G / D), groups.prefetch, groups.env);
  t->val_loader_.emplace(std::move(vl));
  // This rank's rows of one global batch, and with context parallelism
  // its tokens of them (without, the rows are read into inputs_ directly).
  const size_t n = static_cast<size_t>(G / D) * cfg.model.context;
  t->inputs_.resize(n / t->cp_size());
  t->targets_.resize(n / t->cp_size());
  if (t->cp_size() > 1) {
    t->whole_inputs_.resize(n);
    t->whole_targets_.resize(n);
  }
  return t;
}

int32_t* Trainer::read_inputs() { return cp_size() > 1 ? whole_inputs_.data() : inputs_.data(); }
int32_t* Trainer::read_targets() { return cp_size() > 1 ? whole_targets_.data() : targets_.data(); }

void Trainer::TakeTokens(int rows) {
  if (cp_size() == 1) return;
  const int T = cfg_.model.context;
  cp::TakeChunks(whole_inputs_.data(), rows, T, cp_rank(), cp_size(), inputs_.data());
  cp::TakeChunks(whole_targets_.data(), rows, T, cp_rank(), cp_size(), targets_.data());
}

int64_t Trainer::tokens_per_step() const {
  return int64_t{cfg_.batch_size} * cfg_.model.context * cfg_.AccumulationSteps();
}

pp::StageFunctions Trainer::StageFunctionsFor(const int32_t* inputs, const int32_t* targets,
                                              int rows, int slots, float dloss, double* loss_sum) {
  const int T = cfg_.model.context / cp_size();
  Gpt* m = model_.get();
  pp::StageFunctions f;
  f.forward = [=](int micro) -> absl::Status {
    const size_t at = static_cast<size_t>(micro) * rows * T;
    ASSIGN_OR_RETURN(double loss,
                     m->Forward(inputs + at, targets + at, rows, T, micro % slots, dloss));
    *loss_sum += loss;
    return absl::OkStatus();
  };
  // The step's last backward (microbatch M - 1: every schedule runs the
  // backwards in microbatch order) finishes the gradients layer by layer:
  // the buckets behind it may start.
  dp::GradientBuckets* buckets = groups_.overlap_grad_reduce ? buckets_.get() : nullptr;
  const int last = microbatches_ - 1;
  f.backward = [=](int micro) -> absl::Status {
    if (buckets == nullptr || micro != last) return m->Backward(dloss, micro % slots);
    return m->Backward(dloss, micro % slots,
                       [buckets](int64_t offset) { return buckets->Ready(offset); });
  };
  f.input = [=](int micro) { return m->StageInput(micro % slots); };
  f.output = [m] { return m->StageOutput(); };
  f.output_grad = [m] { return m->OutputGrad(); };
  f.input_grad = [m] { return m->InputGrad(); };
  return f;
}

absl::Status Trainer::ReduceGradients(Tensor* weights, Tensor* grads, Communicator** range_group) {
  Communicator* dp = groups_.dp;
  if (shard_floats_ > 0) {
    // ZeRO-1: each rank receives the sum of its shard only.
    *grads = Tensor::F32(static_cast<float*>(grad_shard_.get()), {shard_floats_},
                         model_->grad_buffer().device);
    *weights = model_->weight_buffer().Slice(dp_rank() * shard_floats_, {shard_floats_});
    *range_group = dp;
    return dp->ReduceScatter(model_->grad_buffer(), *grads);
  }
  // Buckets from the end of the buffer; with overlap the backward has
  // started some already, and this waits for the rest.
  return buckets_->Finish();
}

absl::StatusOr<StepRecord> Trainer::Step() {
  const int T = cfg_.model.context / cp_size(), D = replicas(), M = microbatches_;
  const int64_t G = int64_t{cfg_.batch_size} * cfg_.AccumulationSteps();
  StepRecord r;
  // The time split reads one chain of clock readings: each part starts where
  // the one before ended, so data + forward + backward + bubble + optimizer
  // is the step, and the trace's spans (src/core/trace.h) are the same
  // intervals.
  const int64_t step_begin = NowNanos();
  for (Communicator* c : {groups_.tp, groups_.dp, groups_.pp, groups_.embedding, groups_.cp}) {
    if (c != nullptr) c->ResetStats();
  }
  model_->TakeLink();  // validation's, before this step
  RETURN_IF_ERROR(model_->ZeroGrads());
  if (buckets_ != nullptr) buckets_->BeginStep();
  train_batches_->Next(read_inputs(), read_targets());
  TakeTokens(static_cast<int>(G / D));
  RETURN_IF_ERROR(model_->SetBatchShape(micro_rows_, T));
  const int64_t data_end = NowNanos();
  r.t_data = StepSpan("data", step_begin, data_end);

  // The microbatches, in this stage's schedule. Only the last stage sees
  // losses; it hands their mean to the other stages afterwards.
  const float dloss = 1.0f / static_cast<float>(G * cfg_.model.context);
  double loss_sum = 0.0;
  const int P = pp_size(), stage = groups_.pp ? groups_.pp->rank() : 0;
  pp::StageTiming timing;
  timing.begin_ns = data_end;  // the chain goes on through the schedule
  RETURN_IF_ERROR(pp::RunStage(
      pp::StageOps(groups_.schedule, P, stage, M), groups_.pp,
      StageFunctionsFor(inputs_.data(), targets_.data(), micro_rows_, slots_, dloss, &loss_sum),
      &timing, groups_.overlap_p2p));
  r.t_forward = timing.forward_seconds;
  r.t_backward = timing.backward_seconds;
  float loss = static_cast<float>(loss_sum / M);
  // The loss is a host value (Forward returns it): it travels as host memory.
  const Tensor host_loss = Tensor::F32(&loss, {1}, Device::kCpu);
  if (P > 1) RETURN_IF_ERROR(groups_.pp->Broadcast(host_loss, P - 1));
  const int64_t optimizer_begin = P > 1 ? NowNanos() : timing.end_ns;
  if (P > 1) {
    // Waiting for the last stage's loss is waiting for a neighbour too: the
    // bubble runs on from the schedule's end to here.
    StepSpan("bubble", timing.end_ns, optimizer_begin);
    r.t_bubble =
        static_cast<double>(optimizer_begin - timing.begin_ns) * 1e-9 - r.t_forward - r.t_backward;
  }

  RETURN_IF_ERROR(model_->FinishGrads());
  // Sequence parallelism: each TP rank's LayerNorm gradients cover its rows.
  RETURN_IF_ERROR(model_->ReduceSequenceGrads());
  // The tied embedding: the first stage's lookup and the last stage's head
  // each hold part of its gradient; both need the sum.
  if (Parallel(groups_.embedding)) {
    ASSIGN_OR_RETURN(int wte, model_->table().Find("wte"));
    RETURN_IF_ERROR(
        groups_.embedding->AllReduce(model_->table().View(model_->grads(), wte), ReduceOp::kSum));
  }
  Tensor weights = model_->weights(), grads = model_->grads();
  Communicator* range_group = nullptr;
  if (dp_size() > 1) {
    // The mean loss over the global batch (each rank's is over an equal
    // share of its tokens), and the summed gradient of all rows.
    // (The gradients first: started buckets may still be in flight on the
    // group, and nothing else may use it until they are done.)
    if (!local()) RETURN_IF_ERROR(ReduceGradients(&weights, &grads, &range_group));
    if (buckets_ != nullptr) {
      r.t_grad_overlapped = buckets_->overlapped_seconds();
      r.t_grad_exposed = buckets_->exposed_seconds();
    }
    RETURN_IF_ERROR(groups_.dp->AllReduce(host_loss, ReduceOp::kSum));
    loss /= static_cast<float>(dp_size());
  }
  r.loss = dp_size() > 1 || P > 1 ? static_cast<double>(loss) : loss_sum / M;
  RETURN_IF_ERROR(groups_.env->AfterGradients(step_ + 1, *model_->grads_backend(), grads));
  {
    TraceSpan span(TraceTrack::kCompute, "optimizer", "grad norm");
    ASSIGN_OR_RETURN(r.grad_norm, optimizer_->GradNorm(grads, range_group));
  }
  r.lr = LearningRate(step_, cfg_.steps, cfg_.warmup_steps, cfg_.lr, cfg_.min_lr);
  // The loss and norm are the same on every rank, so is the verdict.
  const StepGuard::Verdict verdict = guard_.Check(r.loss, r.grad_norm);
  guard_.Record(verdict, r.loss);
  r.skipped = verdict != StepGuard::Verdict::kApply;
  // A bf16 model's weight copy (the weights its ops read) is rewritten by the
  // update, rounded stochastically with this step's random words: after step
  // s it is always the master weights rounded with the words of step s, so
  // a run resumed at s rebuilds it bit for bit (Restore).
  // With offload the update writes a bf16 copy into the host's staging and
  // reads host gradients (src/train/offload.h).
  const Tensor copy = offload_ != nullptr ? offload_->copy_staging() : model_->weight_copy();
  Tensor copy_range;  // the copy's part that matches `weights`
  if (!copy.empty() && copy.dtype == DType::kBF16) {
    copy_range = range_group != nullptr ? copy.Slice(dp_rank() * shard_floats_, {shard_floats_})
                                        : copy.Slice(0, {model_->table().total_floats()});
  }
  if (!r.skipped) {
    if (offload_ != nullptr) {
      ASSIGN_OR_RETURN(grads, offload_->GradsToHost(grads));
    }
    TraceSpan span(TraceTrack::kCompute, "optimizer", "adamw");
    RETURN_IF_ERROR(optimizer_->Update(weights, grads, r.grad_norm, r.lr,
                                       static_cast<int>(step_ + 1), copy_range, cfg_.seed));
  } else if (!model_->weight_copy().empty()) {
    const StochasticRounding sr{cfg_.seed, static_cast<uint64_t>(step_ + 1), 0};
    RETURN_IF_ERROR(model_->RoundWeightCopy(&sr));
  }
  if (range_group != nullptr && !r.skipped) {
    // Every rank gets every updated shard back (in place: its own block),
    // and a bf16 model's copy too (2 bytes a weight, rounded by its owner).
    RETURN_IF_ERROR(groups_.dp->AllGather(weights, model_->weight_buffer()));
    if (!copy_range.empty()) RETURN_IF_ERROR(groups_.dp->AllGather(copy_range, copy));
  }
  if (offload_ != nullptr && !r.skipped) {
    RETURN_IF_ERROR(offload_->CopyToDevice(model_->weight_copy(), model_->weight_buffer()));
  }
  if (local() && (step_ + 1) % groups_.local_sgd == 0) RETURN_IF_ERROR(AverageReplicas(step_ + 1));
  if (!r.skipped) RETURN_IF_ERROR(model_->WeightsChanged());
  const int64_t step_end = NowNanos();
  r.t_optimizer = StepSpan("optimizer", optimizer_begin, step_end);
  r.t_step = static_cast<double>(step_end - step_begin) * 1e-9;
  if (TraceEvent* e = TraceInterval(TraceTrack::kStep, "step", "step", step_begin, step_end)) {
    std::snprintf(e->name, sizeof e->name, "step %lld", static_cast<long long>(step_ + 1));
    e->AddArg("step", step_ + 1);
  }
  r.memory = {model_->weight_memory_bytes(), gradient_bytes(), optimizer_state_bytes(),
              model_->activation_sizes().total_bytes(), host_offload_bytes()};
  if (offload_ != nullptr) r.link = offload_->TakeLink();
  r.link += model_->TakeLink();
  for (Communicator* c : {groups_.tp, groups_.dp, groups_.pp, groups_.embedding, groups_.cp}) {
    if (Parallel(c)) {
      r.comm.push_back({AxisName(c->axis()), c->stats().seconds, c->stats().bytes});
    }
  }
  ++step_;
  r.step = step_;
  r.tokens_per_s = static_cast<double>(tokens_per_step()) / r.t_step;
  if (peak_gflops_ > 0) {
    // A step is GEMMs and slower work around them, so it cannot truly beat
    // the best GEMM rate; if it seems to, the ceiling was measured in a slow
    // moment, and the rate this process has just shown is the better (still
    // conservative) ceiling. So MFU never exceeds 1.
    const double gflops = r.tokens_per_s * cfg_.model.TrainingFlopsPerToken() / 1e9;
    peak_gflops_ = std::max(peak_gflops_, gflops);
    r.mfu = gflops / peak_gflops_;
  }
  return r;
}

absl::StatusOr<double> Trainer::ValidationLoss() {
  // The same windows whatever the layout: eval_batches x batch_size of them,
  // in microbatches that fit the arena (every DP rank scores all of them),
  // passed forward through the pipeline stages; with context parallelism
  // each ring rank scores its chunks and the ring averages.
  const int T = cfg_.model.context / cp_size(), rows = micro_rows_;
  const int64_t windows = cfg_.eval_batches * cfg_.batch_size;
  const int64_t chunks = (windows + rows - 1) / rows;
  double sum = 0.0;
  int64_t w = 0;
  pp::StageFunctions f;
  f.forward = [&](int) -> absl::Status {
    const int n = static_cast<int>(std::min<int64_t>(rows, windows - w));
    val_loader_->ReadSequential(static_cast<uint64_t>(w), n, read_inputs(), read_targets());
    TakeTokens(n);
    ASSIGN_OR_RETURN(double loss, model_->Forward(inputs_.data(), targets_.data(), n, T));
    sum += loss * n;
    w += n;
    return absl::OkStatus();
  };
  // Every chunk but a short last one has the arena's shape.
  RETURN_IF_ERROR(model_->SetBatchShape(rows, T));
  f.input = [&](int) -> Tensor {
    const int n = static_cast<int>(std::min<int64_t>(rows, windows - w));
    if (!model_->SetBatchShape(n, T).ok()) return Tensor();
    return model_->StageInput(0);
  };
  f.output = [&] { return model_->StageOutput(); };
  RETURN_IF_ERROR(pp::RunStage(pp::ForwardOps(static_cast<int>(chunks)), groups_.pp, f, nullptr));
  float mean = static_cast<float>(sum / static_cast<double>(windows));
  if (cp_size() > 1) {
    RETURN_IF_ERROR(groups_.cp->AllReduce(Tensor::F32(&mean, {1}, Device::kCpu), ReduceOp::kSum));
    mean /= static_cast<float>(cp_size());
    if (pp_size() == 1) return static_cast<double>(mean);
  }
  if (pp_size() > 1) {
    RETURN_IF_ERROR(groups_.pp->Broadcast(Tensor::F32(&mean, {1}, Device::kCpu), pp_size() - 1));
    return static_cast<double>(mean);
  }
  return sum / static_cast<double>(windows);
}

absl::Status Trainer::Restore(const Position& p) {
  if (p.step < 0 || p.step > cfg_.steps) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resume at step ", p.step, " of a ", cfg_.steps, "-step run"));
  }
  RETURN_IF_ERROR(train_batches_->Restore(p.loader));
  step_ = p.step;
  guard_.Restore(p.guard);
  if (p.step > 0) {
    // The weight copy a bf16 model had after step p.step (Step): the masters
    // rounded with that step's words. (SetWeights rounded to nearest.)
    const StochasticRounding sr{cfg_.seed, static_cast<uint64_t>(p.step), 0};
    RETURN_IF_ERROR(model_->RoundWeightCopy(&sr));
  }
  return absl::OkStatus();
}

absl::Status Trainer::AverageReplicas(int64_t step) {
  TraceSpan span(TraceTrack::kCompute, "optimizer", "local SGD: average the replicas");
  // The sum over the replicas, then a scale by 1/D on the host: Backend has
  // no scale op, and this runs once every H steps.
  const Tensor w = model_->weights();
  RETURN_IF_ERROR(groups_.dp->AllReduce(w, ReduceOp::kSum));
  std::vector<float> host(static_cast<size_t>(w.numel()));
  RETURN_IF_ERROR(model_->master_backend()->CopyToHost(host.data(), w));
  const float inv = 1.0f / static_cast<float>(dp_size());
  for (float& x : host) x *= inv;
  RETURN_IF_ERROR(model_->master_backend()->CopyFromHost(w, host.data()));
  if (model_->weight_copy().empty()) return absl::OkStatus();
  // A bf16 model's copy from the averaged masters, rounded with this step's
  // words as the update rounds it.
  const StochasticRounding sr{cfg_.seed, static_cast<uint64_t>(step), 0};
  return model_->RoundWeightCopy(&sr);
}

absl::Status Trainer::ForgetOnResume(Forget what) {
  if (what == Forget::kData) return train_batches_->Restore({});
  if (what == Forget::kRng) train_batches_->Reseed(cfg_.seed + 1);
  return absl::OkStatus();
}

int64_t Trainer::host_offload_bytes() const {
  return host_ == nullptr ? 0 : host_->bytes_allocated();
}

absl::Status Trainer::GetOptimizerState(std::vector<float>* m, std::vector<float>* v) {
  const int64_t total = model_->table().total_floats();
  for (auto [host, dev] : {std::pair{m, optimizer_->moment_m()}, {v, optimizer_->moment_v()}}) {
    if (shard_floats_ > 0) {
      // Each DP rank holds its block of the padded buffer: gather them all.
      host->assign(model_->buffer_floats(), 0.0f);
      const Tensor all = Tensor::F32(host->data(), {model_->buffer_floats()}, Device::kCpu);
      const Tensor mine = all.Slice(dp_rank() * shard_floats_, {shard_floats_});
      RETURN_IF_ERROR(optimizer_->state_backend()->CopyToHost(mine.data, dev));
      RETURN_IF_ERROR(groups_.dp->AllGather(mine, all));
    } else {
      host->assign(dev.numel(), 0.0f);
      RETURN_IF_ERROR(optimizer_->state_backend()->CopyToHost(host->data(), dev));
    }
    host->resize(total);
  }
  return absl::OkStatus();
}

absl::Status Trainer::SetOptimizerState(const std::vector<float>& m, const std::vector<float>& v) {
  const int64_t total = model_->table().total_floats();
  if (static_cast<int64_t>(m.size()) != total || static_cast<int64_t>(v.size()) != total) {
    return absl::InvalidArgumentError("optimizer state does not match the parameter table");
  }
  const int64_t begin = shard_floats_ > 0 ? dp_rank() * shard_floats_ : 0;
  for (auto [host, dev] : {std::pair{&m, optimizer_->moment_m()}, {&v, optimizer_->moment_v()}}) {
    // The range may run into the zero padding past the table.
    std::vector<float> range(dev.numel(), 0.0f);
    for (int64_t i = 0; i < dev.numel() && begin + i < total; ++i) range[i] = (*host)[begin + i];
    RETURN_IF_ERROR(optimizer_->state_backend()->CopyFromHost(dev, range.data()));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Run(const std::function<absl::Status(const StepRecord&)>& on_step) {
  while (step_ < cfg_.steps) {
    ASSIGN_OR_RETURN(StepRecord r, Step());
    const bool eval_now =
        (cfg_.eval_every > 0 && r.step % cfg_.eval_every == 0) || r.step == cfg_.steps;
    if (eval_now) {
      TraceSpan span(TraceTrack::kStep, "validation", "validation");
      ASSIGN_OR_RETURN(double v, ValidationLoss());
      r.val_loss = v;
    }
    if (on_step) RETURN_IF_ERROR(on_step(r));
  }
  return absl::OkStatus();
}

}  // namespace ladder
