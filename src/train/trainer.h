// The training loop: microbatches with gradient accumulation, global-norm
// clipping, AdamW with warmup + cosine LR, periodic validation, metrics.
//
// A step reads one global batch of G = batch_size x A sequences (A
// accumulation steps). With data parallelism of degree D, DP rank d takes
// rows [d G/D, (d+1) G/D) of it and runs them as M microbatches of G/(D M)
// rows (M = --microbatches, by default A): forward, backward with
// dloss = 1 / (G T), so the summed gradient is that of the mean loss over the
// global batch. With pipeline parallelism of degree P the microbatches flow
// through the P stages in a schedule (src/parallel/pipeline_parallel/);
// without, the same schedule code runs them one after another. Then the tied
// embedding's gradient is all-reduced between the first and last stage,
// gradients are all-reduced over the DP group in buckets (or, with ZeRO-1,
// reduce-scattered), clipped by the global norm and applied by AdamW.
// Tensor-parallel ranks of one DP rank and stage read the same rows and
// compute one stage together; context-parallel ranks read the same rows
// and each computes its chunks of every sequence
// (src/parallel/context_parallel/ring_attention.h), their gradients summed
// with the data-parallel ones. Everything is a pure function of (config,
// seed, data, layout), so two runs give identical losses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/data/loader.h"
#include "src/model/gpt.h"
#include "src/parallel/data_parallel/gradient_buckets.h"
#include "src/parallel/pipeline_parallel/schedule.h"
#include "src/train/adamw.h"
#include "src/train/batch_reader.h"
#include "src/train/env.h"
#include "src/train/guard.h"
#include "src/train/metrics.h"
#include "src/train/offload.h"
#include "src/train/run_config.h"

namespace ladder {

// The parallel groups of a trainer's rank (null means a group of one), how
// the step uses them, and its guards.
struct TrainerOptions {
  Communicator* tp = nullptr;
  // Every rank holding the same weights (Axis::kData): the data-parallel
  // replicas, and with context parallelism each replica's ring ranks.
  Communicator* dp = nullptr;
  // Context parallelism (Axis::kContext; GptParallel::cp): the ranks that
  // share each sequence. They read the same rows, each its chunks of them.
  Communicator* cp = nullptr;
  Communicator* pp = nullptr;
  // The first and last stage of one (dp, tp) position: the tied embedding.
  Communicator* embedding = nullptr;
  // ZeRO-1: reduce-scatter the gradients instead of all-reducing them, keep
  // and update only this DP rank's 1/D of the AdamW state and weights, then
  // all-gather the weights.
  bool zero1 = false;
  pp::Schedule schedule = pp::Schedule::k1F1B;
  int microbatches = 0;  // 0: the config's accumulation steps
  // Without ZeRO-1, the DP all-reduce goes in buckets of this many floats,
  // last parameters first (the order the backward finishes them).
  int64_t bucket_floats = int64_t{25} << 18;  // 25 MiB
  // Start each bucket's all-reduce as soon as the step's last backward has
  // passed it, so it travels while the backward goes on
  // (src/parallel/data_parallel/gradient_buckets.h); the same sums bit for
  // bit. Not with ZeRO-1 (one reduce-scatter over the whole buffer),
  // sequence parallelism (its LayerNorm gradients are summed after the
  // backward), local SGD or parameter offload.
  bool overlap_grad_reduce = false;
  // Pipeline stages overlap their sends and receives with their passes
  // (pp::RunStage's overlap); needs a pipeline group that starts them
  // (Communicator::StartsPointToPoint).
  bool overlap_p2p = false;
  // Each microbatch's forward and backward recorded once as a CUDA graph
  // and replayed (Gpt::UseGraphs); the same results bit for bit.
  bool cuda_graph = false;
  // Sequence parallelism inside the tensor-parallel group
  // (GptParallel::sequence_parallel).
  bool sequence_parallel = false;
  // Activation recomputation (GptParallel::recompute).
  Recompute recompute = Recompute::kNone;
  // Storage of activations and of the weights the ops read
  // (GptParallel::storage): kF32, or kBF16 for mixed precision.
  DType storage = DType::kF32;
  // Offload (src/train/offload.h): AdamW's moments and the fp32 master
  // weights in host memory, the update on the host; with kParams the
  // weights the ops read and the gradients too, streamed a layer at a time
  // (src/model/layer_stream.h). Device backends.
  Offload offload = Offload::kNone;
  // Local SGD (the lesson on asynchronous updates): with H > 1 the
  // data-parallel replicas do not sum their gradients; each clips and
  // applies its own, with its own AdamW moments, and every H steps the
  // replicas' weights are averaged (one all-reduce of the weights instead
  // of H of the gradients). Between averages the replicas drift apart, each
  // seeing the others' progress up to H - 1 steps late. 0 or 1: the plain
  // synchronous step. Not with ZeRO-1, context parallelism or offload.
  int local_sgd = 0;
  // Read each step's batch on a loading thread while the step before
  // computes (src/train/batch_reader.h); the same batches either way.
  bool prefetch = false;
  GuardConfig guard;
  // Where the summed gradient is shown before the guard judges it
  // (Env::AfterGradients); not owned.
  Env* env = Env::Default();
};

class Trainer {
 public:
  // `train` and `val` must outlive the trainer. `peak_gflops` is the rate MFU
  // is measured against (0: MFU not reported), raised to any step's own rate
  // that beats it, so MFU <= 1. Every member of the groups
  // must create its trainer with the same config.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const RunConfig& cfg, Backend* backend,
                                                         const std::vector<int32_t>* train,
                                                         const std::vector<int32_t>* val,
                                                         double peak_gflops,
                                                         TrainerOptions groups = {});

  // One optimizer step; the record has everything but val_loss.
  absl::StatusOr<StepRecord> Step();
  // Mean loss over the first eval_batches * batch_size windows of the
  // validation split, in stream order (the same windows every time).
  absl::StatusOr<double> ValidationLoss();
  // Runs the remaining steps; after each step calls `on_step` (if set) with
  // the record (val_loss filled on evaluation steps).
  absl::Status Run(const std::function<absl::Status(const StepRecord&)>& on_step);

  Gpt& model() { return *model_; }
  const Gpt& model() const { return *model_; }
  int64_t step() const { return step_; }
  // The rate MFU divides by: peak_gflops from Create, raised to any step's.
  double peak_gflops() const { return peak_gflops_; }
  const RunConfig& config() const { return cfg_; }
  int64_t tokens_per_step() const;
  // AdamW's moments in device memory (0 when offloaded).
  int64_t optimizer_state_bytes() const { return host_ != nullptr ? 0 : optimizer_->state_bytes(); }
  // Host memory the offload holds, as its backend counts it: masters,
  // moments and staging (0 without).
  int64_t host_offload_bytes() const;
  StepGuard& guard() { return guard_; }
  // Where training stands: optimizer updates done and the data position.
  struct Position {
    int64_t step = 0;
    DataLoader::Position loader;
    StepGuard::State guard;
  };
  Position position() const { return {step_, train_batches_->position(), guard_.state()}; }
  // Continues from `p` (with weights and optimizer state set to match).
  absl::Status Restore(const Position& p);
  // What a resume deliberately leaves out (--resume-forget, for the
  // checkpoint lesson), called after Restore: kData, the data position (the
  // batches start again at the stream's beginning, replaying what the run
  // has seen); kRng, the random state (the batch order from here on is
  // drawn from another seed, as a fresh generator would draw it). ladder's
  // other random numbers (initialization, bf16 rounding) are counter-based,
  // keyed by the seed and the step, so they have no state to lose.
  enum class Forget { kNothing, kData, kRng };
  absl::Status ForgetOnResume(Forget what);
  // AdamW's moments for every parameter of this rank's table (its
  // total_floats()), collective over the DP group under ZeRO-1 (each rank
  // holds 1/D of them).
  absl::Status GetOptimizerState(std::vector<float>* m, std::vector<float>* v);
  // Sets this rank's part of the moments from whole-table arrays.
  absl::Status SetOptimizerState(const std::vector<float>& m, const std::vector<float>& v);
  // This rank's place in the data group (the ZeRO-1 shard it updates).
  int dp_rank() const { return groups_.dp ? groups_.dp->rank() : 0; }
  // The gradient buffer, and under ZeRO-1 the reduced shard beside it.
  int64_t gradient_bytes() const {
    const bool shard_on_device = model_->grad_buffer().device == model_->device();
    return model_->grad_memory_bytes() + (shard_on_device ? shard_floats_ * 4 : 0);
  }
  int microbatches() const { return microbatches_; }
  int micro_rows() const { return micro_rows_; }

 private:
  Trainer(const RunConfig& cfg, double peak_gflops, TrainerOptions groups)
      : cfg_(cfg), peak_gflops_(peak_gflops), groups_(groups) {}
  int dp_size() const { return groups_.dp ? groups_.dp->size() : 1; }
  int cp_size() const { return groups_.cp ? groups_.cp->size() : 1; }
  int cp_rank() const { return groups_.cp ? groups_.cp->rank() : 0; }
  // The data-parallel replicas (the data group less its ring ranks), and
  // this rank's: which rows of each batch it reads.
  int replicas() const { return dp_size() / cp_size(); }
  int replica() const { return dp_rank() / cp_size(); }
  // Where a batch's whole rows are read: whole_* with context parallelism,
  // else inputs_ and targets_ themselves.
  int32_t* read_inputs();
  int32_t* read_targets();
  // With context parallelism, this rank's chunks of `rows` whole sequences
  // from whole_* into inputs_ and targets_; nothing without.
  void TakeTokens(int rows);
  int pp_size() const { return groups_.pp ? groups_.pp->size() : 1; }
  // The hand-over functions of this rank's stage for the rows at `rows`.
  pp::StageFunctions StageFunctionsFor(const int32_t* inputs, const int32_t* targets, int rows,
                                       int slots, float dloss, double* loss_sum);
  // Sums the data-parallel gradients (bucketed all-reduce or ZeRO-1
  // reduce-scatter); returns the range of the buffers this rank updates.
  absl::Status ReduceGradients(Tensor* weights, Tensor* grads, Communicator** range_group);
  // Local SGD: whether step `step` (1-based) ends by averaging the
  // replicas' weights, and the average.
  bool local() const { return groups_.local_sgd > 1 && dp_size() > 1; }
  absl::Status AverageReplicas(int64_t step);

  RunConfig cfg_;
  double peak_gflops_;
  TrainerOptions groups_;
  std::unique_ptr<Gpt> model_;
  std::optional<AdamW> optimizer_;
  StepGuard guard_;
  int microbatches_ = 1, micro_rows_ = 1, slots_ = 1;
  int64_t shard_floats_ = 0;  // ZeRO-1: this rank's slice of the flat buffers
  DeviceBuffer grad_shard_;   // ZeRO-1: its reduced gradient
  // --offload optimizer: the host backend (masters, moments, update) and
  // the step's host side.
  std::unique_ptr<Backend> host_;
  std::unique_ptr<OptimizerOffload> offload_;
  std::unique_ptr<BatchReader> train_batches_;
  // The data-parallel gradient sum without ZeRO-1 (null without a data group).
  std::unique_ptr<dp::GradientBuckets> buckets_;
  std::optional<DataLoader> val_loader_;
  // This rank's tokens of its rows of a batch; with context parallelism
  // also the rows as read (whole_*), of which inputs_ hold its chunks.
  std::vector<int32_t> whole_inputs_, whole_targets_, inputs_, targets_;
  int64_t step_ = 0;
};

}  // namespace ladder
