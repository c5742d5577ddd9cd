// Gpt: a GPT-2 model with explicit forward and backward passes over the op
// interface (as llm.c does, no autograd graph). It owns the device memory of
// its weights, gradients and activation arena; the optimizer state lives with
// the trainer. Nothing here knows which backend runs the ops.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/activations.h"
#include "src/model/gpt_config.h"
#include "src/model/kv_cache.h"
#include "src/model/layer_stream.h"
#include "src/model/parameters.h"
#include "src/model/weight_format.h"
#include "src/parallel/comm.h"
#include "src/parallel/context_parallel/ring_attention.h"
#include "src/parallel/tensor_parallel/layers.h"

namespace ladder {

// How one model instance is split over ranks and how many microbatches it
// keeps in flight. The defaults are the whole model, one microbatch at a time.
struct GptParallel {
  // Tensor-parallel group (size > 1): this rank holds and computes its shard
  // of every layer (Megatron style); its members must make the same calls.
  Communicator* tp = nullptr;
  // Pipeline group (size > 1): this rank holds the layers of stage
  // pp->rank() of pp->size() (parameters.h StageLayers), the embedding on the
  // first stage and the final LayerNorm and head on the last.
  Communicator* pp = nullptr;
  // Context parallelism (size R > 1): this rank holds 2 of every
  // sequence's 2R equal chunks of tokens, chunk r and chunk 2R - 1 - r for
  // group rank r (an early and a late one, so causal attention's work is
  // the same on every rank), and attention runs as a ring over the group
  // (RingAttentionForward). Forward and Backward then take B sequences of
  // T / R tokens: this rank's chunks, side by side. The context must divide
  // into 2R chunks.
  Communicator* cp = nullptr;
  // Sequence parallelism (with tp of size > 1; tensor_parallel/layers.h):
  // the LayerNorm regions and the residual stream keep only this rank's
  // B T / tp token rows, and the pipeline's hand-over tensors are those
  // shards. B T must be divisible by tp. The LayerNorm weights' gradients
  // are then partial (ReduceSequenceGrads).
  bool sequence_parallel = false;
  // Activation slots: microbatches whose forward state is kept at once (a
  // pipeline schedule runs several forwards before their backwards).
  int slots = 1;
  // Activation recomputation: what the forward keeps and the backward redoes
  // (activations.h Recompute has the levels and sizes).
  Recompute recompute = Recompute::kNone;
  // Pads the flat weight and gradient buffers with zeros to a multiple of
  // this many floats (ZeRO-1 cuts them into equal shards).
  int64_t buffer_multiple = 1;
  // How activations and the weights the ops read are stored (backend.h
  // "Precision"): kF32, or kBF16 for mixed precision, which needs a device
  // backend (cuda, cuda-sim). In bf16 the model keeps fp32 master weights
  // (weights()) and fp32 gradients, and the ops read a bf16 copy of the
  // weights (weight_copy()) that the optimizer rewrites at every step.
  DType storage = DType::kF32;
  // Optimizer offload (src/train/offload.h): the fp32 master weights live in
  // host memory allocated by this backend (a CPU backend; not owned), and the
  // ops read a device copy in `storage` (weight_copy(), fp32 or bf16) that
  // the host-side update refreshes. Null: the masters are on the device
  // (and in fp32 the ops read them directly). Needs a device backend.
  Backend* master_host = nullptr;
  // Parameter offload (with master_host; src/model/layer_stream.h): the
  // weights the ops read (a bf16 copy, or the fp32 masters) and the
  // gradients live in host memory too, and each layer's block comes to the
  // device for its forward and backward; the device keeps the tensors
  // outside the layers and two layers' slots.
  bool offload_params = false;
};

// A weight matrix [OC, C] in int8: q [OC, C] i8, scales [OC, C / group] f32
// (backend.h "int8 weights").
struct Int8Matrix {
  Tensor q, scales;
};

class Gpt {
 public:
  // Allocates this rank's weights (and gradients if `training`) and an
  // activation arena for `par.slots` microbatches of up to `max_batch`
  // sequences of cfg.context tokens.
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& cfg, Backend* backend,
                                                     int max_batch, bool training,
                                                     const GptParallel& par = {});

  const GptConfig& config() const { return cfg_; }
  const ParameterTable& table() const { return table_; }
  Backend* backend() const { return backend_; }
  Device device() const { return backend_->device(); }
  bool training() const { return training_; }
  bool is_first_stage() const { return table_.layout().pp_rank == 0; }
  bool is_last_stage() const { return table_.layout().pp_rank == table_.layout().pp_size - 1; }
  // Flat views over all weights / gradients, laid out by table(): the
  // weights on master_device(), the gradients on the backend's device.
  Tensor weights() const { return weight_buffer().Slice(0, {table_.total_floats()}); }
  Tensor grads() const { return grad_buffer().Slice(0, {table_.total_floats()}); }
  // The same buffers with their zero padding (buffer_floats() long).
  int64_t buffer_floats() const { return buffer_floats_; }
  Tensor weight_buffer() const {
    return Tensor::F32(static_cast<float*>(weights_.get()), {buffer_floats_}, master_device());
  }
  // Where the fp32 master weights live: the host with optimizer offload
  // (GptParallel::master_host), else the backend's device.
  Device master_device() const { return master_backend_->device(); }
  // The backend that owns the master weights' memory (copies in and out).
  Backend* master_backend() const { return master_backend_; }
  Tensor grad_buffer() const {
    return Tensor::F32(static_cast<float*>(grads_.get()), {buffer_floats_},
                       grads_backend()->device());
  }
  // The backend whose memory holds the gradient buffer: the host's under
  // parameter offload, else the model's.
  Backend* grads_backend() const { return stream_ != nullptr ? master_backend_ : backend_; }
  const ActivationSizes& activation_sizes() const { return arena_sizes_; }
  DType storage() const { return par_.storage; }
  // Device memory the weights take (padding included): the fp32 masters
  // unless offloaded, plus the copy the ops read if there is one.
  int64_t weight_memory_bytes() const;
  // Device memory the gradients take: the buffer, or under parameter
  // offload the resident tensors' and two layers'.
  int64_t grad_memory_bytes() const;
  bool master_on_host() const { return par_.master_host != nullptr; }
  // The copy of the weights the ops read, laid out like weight_buffer()
  // (buffer_floats() elements, padding included): bf16 for a bf16 model,
  // fp32 for an fp32 model whose masters are offloaded; empty when the ops
  // read the masters themselves. On the device, or under parameter offload
  // on the host (a bf16 copy; fp32 layers stream from the masters).
  Tensor weight_copy() const;
  // Rebuilds weight_copy() from the fp32 master weights: a bf16 copy each
  // element rounded to nearest even (sr null) or stochastically with the
  // random words of optimizer step sr->step (the copy that step's update
  // wrote; sr->offset is ignored: each tensor's words are its own,
  // ParameterTable::RoundingOffset); an fp32 copy exactly. SetWeights does
  // it (to nearest). No-op without a copy.
  absl::Status RoundWeightCopy(const StochasticRounding* sr);
  // Parameter offload: after the optimizer rewrote the host copy (or the
  // masters), the device's resident tensors are refreshed from it. No-op
  // otherwise.
  absl::Status WeightsChanged();
  // Parameter offload: brings the resident tensors' gradients to the host
  // buffer, after the step's last Backward. No-op otherwise.
  absl::Status FinishGrads();
  // Parameter offload: the link's traffic since the last call (zeros
  // otherwise), and resets it.
  LinkTraffic TakeLink();

  // GPT-2 initialization from a seed (see ParameterTable::Initialize).
  absl::Status InitWeights(uint64_t seed);
  // Copies all weights from / to host memory of table().total_floats() floats
  // (the fp32 master weights; SetWeights then rebuilds a bf16 model's copy).
  absl::Status SetWeights(const float* host);
  absl::Status GetWeights(float* host) const;
  // All weights of the whole model in the unsharded layout
  // (ParameterTable(GptParameterSpecs(config()))), assembled from the shards
  // of the tensor-parallel and pipeline groups: collective over both, every
  // member gets them.
  absl::Status GetLogicalWeights(std::vector<float>* host);
  // The inverse: every rank takes the elements it holds from `whole`, all
  // weights in the unsharded layout (e.g. a model file's). Not collective.
  // InvalidArgument if `whole` is not that layout's size.
  absl::Status SetLogicalWeights(const std::vector<float>& whole);

  absl::Status ZeroGrads();
  // Lays out the activation slots for microbatches of B x T tokens (T: this
  // rank's share with context parallelism) and copies the shape's token
  // positions to the device, once per shape. Forward does it itself; a later pipeline stage calls
  // it before receiving its first input into StageInput().
  absl::Status SetBatchShape(int B, int T);
  // Forward of this rank's stage over B sequences of T <= context tokens
  // (host arrays of B*T ids), keeping its state in activation slot `slot`.
  // The ids are checked on the host (InvalidArgument names the first one
  // outside the vocabulary) and staged to the device with one copy each.
  // The first stage embeds `tokens`; a later stage starts from StageInput(slot),
  // which must hold the previous stage's output. A stage other than the last
  // ends with its residual stream in StageOutput(). The last stage with
  // targets computes each token's loss and returns the mean; otherwise 0.
  // With dloss != 0 (training, targets, and the whole vocabulary on this
  // rank: no tensor parallelism) the loss's backward runs in the same pass,
  // the classifier fused (Backend::CrossEntropyFused): the logits turn into
  // their gradient at once, and the slot's Backward must get the same dloss.
  absl::StatusOr<double> Forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                                 int slot = 0, float dloss = 0);
  // Backward of slot's last Forward (with targets on the last stage);
  // accumulates into grads(). On the last stage it starts from the loss:
  // dloss is the gradient of the objective w.r.t. each token's loss (for a
  // mean over N tokens and A microbatches, 1 / (N * A)). Other stages start
  // from OutputGrad(), which must hold the gradient of their StageOutput().
  // A stage other than the first ends with the gradient of its StageInput()
  // in InputGrad().
  // `grads_ready`, if set, is called after each transformer layer's
  // backward with the offset in grads() from which every gradient this
  // backward writes is complete (the layer's first tensor: the buffer's
  // layers and ln_f lie after it), so a caller that knows this is the
  // step's last backward can start reducing them (src/parallel/
  // data_parallel/gradient_buckets.h). Its error ends the backward. Not
  // with a layer stream (offload of the parameters).
  absl::Status Backward(float dloss, int slot = 0,
                        const std::function<absl::Status(int64_t offset)>& grads_ready = nullptr);
  // The pipeline's hand-over tensors, [B,T,C] of the current batch shape
  // ([B T / tp, C] with sequence parallelism).
  Tensor StageInput(int slot) const;
  Tensor StageOutput() const;
  Tensor OutputGrad() const;
  Tensor InputGrad() const;
  // Inference with a paged KV cache (src/model/kv_cache.h): runs the new
  // tokens of several sequences through the model at once, writing their
  // keys and values into `cache` and attending over everything cached for
  // their sequences, and returns each token's next-token logits
  // (tokens.size() x vocab_size floats). Needs the whole model on this rank.
  // The batch is checked on the host (InvalidArgument, nothing run), then
  // all its ids (tokens, positions, sequences, cache slots, block tables)
  // go to the device in one copy; every op then covers all tokens at once
  // (one embedding call per step, whatever the sequences and positions), and
  // the logits come back in one copy.
  // One call at a time per model (it reuses its scratch between calls).
  absl::Status ForwardCached(const CachedTokens& batch, KvCache& cache, std::vector<float>* logits);
  // The same forward, with the next tokens drawn on the device instead of
  // the logits returned: ids[j] is drawn from the logits of the batch's
  // token specs[j].row by Backend::SampleTokens (token_sampling.h), and only
  // the ids cross to the host. What a decode step needs when no request
  // wants its logits (log-probabilities, penalties, constraints).
  // InvalidArgument for a bad batch or spec (nothing run for a spec error
  // found on the host; the forward has run when SampleTokens refuses).
  absl::Status ForwardSample(const CachedTokens& batch, KvCache& cache,
                             absl::Span<const TokenSampleSpec> specs, std::vector<int32_t>* ids);
  // One sequence from position 0 through the cache's first blocks (which it
  // overwrites): the logits after every token of `tokens` (at most the
  // context and the cache). The scoring path of `eval` in any format.
  absl::Status PrefillLogits(const std::vector<int32_t>& tokens, KvCache& cache,
                             std::vector<float>* logits);
  // The same run, returning instead each token's final hidden state: the
  // residual stream after the final LayerNorm (ln_f), the head's input,
  // tokens.size() x n_embd floats. Embeddings are made from it.
  absl::Status PrefillHidden(const std::vector<int32_t>& tokens, KvCache& cache,
                             std::vector<float>* hidden);
  // Serving with packed weights (weight_format.h): replaces each weight
  // matrix by its bf16 or int8 form and keeps only the other tensors in
  // fp32, so the model shrinks to about a half (bf16) or a quarter (int8).
  // After it the model runs ForwardCached only (Forward, SetWeights,
  // GetWeights refuse). Needs an inference model holding the whole model
  // (FailedPrecondition otherwise); kBF16 needs the CPU backend
  // (InvalidArgument otherwise, nothing changed); kF32 does nothing.
  absl::Status QuantizeWeights(WeightFormat format);
  WeightFormat weight_format() const { return weight_format_; }
  // Serving with bf16 activations (W8A16): from now on the cached forward
  // keeps every activation row in bf16 (the residual stream, LayerNorm
  // outputs, qkv, attention, MLP) and runs the int8 matmuls as W8A16 on the
  // tensor cores; each op computes in fp32 and rounds its output once. The
  // embedding is summed in fp32 and then rounded; the LayerNorm weights get
  // a bf16 copy (the op reads one dtype); biases and statistics stay fp32,
  // and so do the logits (the head writes f32). Needs int8 weights
  // (QuantizeWeights) and a device backend: FailedPrecondition otherwise,
  // nothing changed. Drops recorded graphs. One host thread, between calls.
  absl::Status UseBf16Activations();
  DType activations() const { return cached_act_; }
  // Bytes of all weights as stored (packed matrices, with their scales for
  // int8, and fp32 for the rest).
  int64_t weight_bytes() const;
  // Logits of sequence b at position t of the last Forward: vocab_size floats
  // (FailedPrecondition unless this rank holds the whole model).
  absl::Status LogitsAt(int b, int t, std::vector<float>* out) const;
  // Its final hidden state there (after ln_f, the head's input): n_embd
  // floats, under the same conditions.
  absl::Status HiddenAt(int b, int t, std::vector<float>* out) const;
  // With sequence parallelism, sums the LayerNorm weights' and biases'
  // gradients over the tensor-parallel group (each rank's cover only its own
  // rows); a no-op otherwise. Collective over the group: once per
  // step, after the last microbatch's Backward.
  absl::Status ReduceSequenceGrads();
  // Per-token losses of slot's last Forward with targets (B*T floats).
  absl::Status Losses(std::vector<float>* out, int slot = 0) const;

  // CUDA graphs (Backend::Capture). When on, a training Forward (dloss !=
  // 0) and its Backward run their device work (everything between the
  // host's checks and uploads and the losses coming back) as one graph per
  // {pass, slot, B, T, dloss}; a decode step of the cached forward (one new
  // token per sequence) as one graph per {tokens, block-table width, cache},
  // its block tables padded to a power-of-two width so that a graph serves
  // many steps. The first call of each key runs the ops as usual (sizing
  // the scratch), the second records them, every later one replays them
  // with one launch; the results are bitwise those of the ops run one by
  // one. Eager still: evaluation, prefill and speculative verification, a
  // Backward given `grads_ready`. FailedPrecondition, naming the reason,
  // where the backend has no graphs or a pass needs the host between ops:
  // tensor or context parallelism (communicator calls inside the pass) and
  // parameter offload (layers stream in). One host thread, between steps.
  absl::Status UseGraphs(bool on);
  struct GraphCounts {
    int64_t captures = 0;  // graphs recorded (again, after the scratch moved)
    int64_t replays = 0;   // passes run as one graph launch
  };
  GraphCounts graph_counts() const { return graph_counts_; }

 private:
  Gpt(const GptConfig& cfg, Backend* backend, int max_batch, bool training, ParameterTable table,
      const GptParallel& par);
  absl::Status CheckSlot(int slot) const;
  // Forward's and Backward's device work, once the host has checked and
  // uploaded their inputs: no host round trip inside (what a graph needs).
  absl::Status ForwardOps(int slot, bool with_loss, float dloss);
  absl::Status BackwardOps(float dloss, int slot,
                           const std::function<absl::Status(int64_t offset)>& grads_ready);
  // Runs `ops` as the graph of `key` (UseGraphs): eagerly the first time,
  // then recorded once and replayed. A key names everything the recorded
  // launches depend on besides the memory they read.
  enum class GraphPass { kForward, kBackward, kDecode };
  struct GraphKey {
    GraphPass pass;
    int slot;            // activation slot; for a decode step its CachedOutput
    int64_t rows, cols;  // B and T; for a decode step its tokens and block-table width
    uint32_t dloss_bits = 0;
    uintptr_t cache = 0;  // a decode step's KV cache: its memory, blocks, format
    int cache_blocks = 0;
    bool cache_int8 = false;
    auto operator<=>(const GraphKey&) const = default;
  };
  absl::Status RunGraphed(const GraphKey& key, const std::function<absl::Status()>& ops);
  // What a cached run returns: each token's logits, or its hidden state
  // after ln_f (the head is then skipped).
  enum class CachedOutput { kLogits, kHidden };
  // Runs the batch; returns the device rows of `what` ([N, Vp] logits or
  // [N, C] hidden states, in the scratch: valid until the next call).
  absl::StatusOr<Tensor> RunCached(const CachedTokens& batch, KvCache& cache, CachedOutput what);
  // A cached run's views into the scratch: its rows, and its ids once on
  // the device.
  struct CachedStep {
    Tensor x, ln, resid, branch, atty, qkv, fch, fch_gelu, out, mean, rstd;
    Tensor emb, emb_pos;  // bf16 activations: the embedding's fp32 sum
    Tensor tokens, pos, seq, slots, tables;
  };
  // Its ops: the embedding, the layers and the head (none for kHidden).
  absl::Status CachedOps(const KvCache& cache, CachedOutput what, const CachedStep& st);
  // The first `width` columns of every row of `rows` (f32, or bf16 widened
  // on the host), to the host in one copy (the padding squeezed out there).
  absl::Status RowsToHost(const Tensor& rows, int64_t width, std::vector<float>* out) const;
  // One sequence from position 0 through the cache's first blocks.
  absl::Status Prefill(const std::vector<int32_t>& tokens, KvCache& cache, CachedOutput what,
                       std::vector<float>* out_rows);
  // The first `count` entries of row (b, t) of `rows` ([B*T, stride] of the
  // last Forward), to the host as floats: LogitsAt and HiddenAt.
  absl::Status RowAt(const char* what, const Tensor& rows, int64_t stride, int64_t count, int b,
                     int t, std::vector<float>* out) const;
  // Attention of layer activations `la` (la.atty, la.lse from la.qkv): the
  // backend's causal attention, or with context parallelism the ring
  // (context_parallel/ring_attention.h).
  absl::Status AttentionForward(const LayerActivations& la, int heads);
  // Its backward: acts_.dqkv from acts_.datty.
  absl::Status AttentionBackward(const LayerActivations& la, int heads);
  cp::RingTensors ring_tensors(const LayerActivations& la) const;
  int cp_size() const { return par_.cp == nullptr ? 1 : par_.cp->size(); }
  ActivationOptions activation_options() const;
  // Layer l's forward from its input la.x up to the MLP's GELU; the MLP's
  // down projection goes to acts_.branch when `project` (the backward's
  // recomputation does not need it).
  absl::Status LayerForward(int l, const LayerActivations& la, bool project);
  int tp_rank() const;
  // The tensor-parallel group as the layers take it: with sequence
  // parallelism, its gather and reduce-scatter buffers.
  tp::Group tp_group() const;
  // The model-wide index of this stage's first layer (trace span names).
  int first_layer() const;
  // Where the first local tensor of transformer layer `layer` (a logical
  // index this rank holds) lies in the parameter buffers.
  int64_t LayerOffset(int layer) const;
  absl::Status CheckNotQuantized(const char* what) const;
  // out = inp @ W^T + bias for a weight matrix in any format: `weight`
  // (fp32 or bf16) unless it is empty, else its int8 form `q`.
  absl::Status Linear(Tensor out, Tensor inp, Tensor weight, const Int8Matrix& q, Tensor bias);
  int64_t vocab_start() const;  // first logical vocabulary row of this rank's wte

  GptConfig cfg_;
  Backend* backend_;
  int max_batch_;
  bool training_;
  GptParallel par_;
  ParameterTable table_;
  int64_t buffer_floats_ = 0;
  int64_t copy_bytes() const;
  // The masters' backend: par_.master_host, or backend_.
  Backend* master_backend_;
  DeviceBuffer weights_, grads_, arena_;
  DeviceBuffer copy_;  // weight_copy()'s memory
  std::unique_ptr<LayerStream> stream_;  // parameter offload
  ActivationSizes arena_sizes_;
  GptTensors w_, g_;
  // Packed weights (QuantizeWeights) live in packed_buffer_: bf16 matrices
  // replace their fp32 tensors in w_ (dtype kBF16); int8 ones go to one
  // Int8Matrix per matrix of w_, whose fp32 tensor is then empty.
  WeightFormat weight_format_ = WeightFormat::kF32;
  DeviceBuffer packed_buffer_;
  int64_t packed_bytes_ = 0, fp32_floats_ = 0;
  Int8Matrix q_wte_;
  std::vector<Int8Matrix> q_qkv_, q_proj_, q_fc_, q_fcproj_;
  // UseBf16Activations: the cached forward's activation dtype, and the bf16
  // copies of the LayerNorm weights it then reads (ln16_[l] = ln1_w, ln1_b,
  // ln2_w, ln2_b of layer l; lnf16_ = lnf_w, lnf_b).
  DType cached_act_ = DType::kF32;
  DeviceBuffer ln16_buffer_;
  std::vector<std::array<Tensor, 4>> ln16_;
  std::array<Tensor, 2> lnf16_;
  GptActivations acts_;
  // ForwardCached's scratch, reused by the next call (grown as needed).
  DeviceBuffer cached_scratch_;
  int64_t cached_scratch_floats_ = 0;
  int bound_B_ = 0, bound_T_ = 0;
  // UseGraphs: the graphs by key; a key seen once (warmed up) has none yet.
  // Decode steps' graphs point into cached_scratch_: dropped when it grows.
  struct GraphEntry {
    bool warmed_up = false;
    std::unique_ptr<DeviceGraph> graph;
  };
  bool use_graphs_ = false;
  std::map<GraphKey, GraphEntry> graphs_;
  GraphCounts graph_counts_;
};

}  // namespace ladder
