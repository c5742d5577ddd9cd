#include "src/model/gpt.h"

#include <algorithm>
#include <bit>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/core/bf16.h"
#include "src/core/status.h"
#include "src/core/trace.h"

namespace ladder {

Gpt::Gpt(const GptConfig& cfg, Backend* backend, int max_batch, bool training, ParameterTable table,
         const GptParallel& par)
    : cfg_(cfg),
      backend_(backend),
      max_batch_(max_batch),
      training_(training),
      par_(par),
      table_(std::move(table)),
      master_backend_(par.master_host != nullptr ? par.master_host : backend) {}

absl::StatusOr<std::unique_ptr<Gpt>> Gpt::Create(const GptConfig& cfg, Backend* backend,
                                                 int max_batch, bool training,
                                                 const GptParallel& par) {
  RETURN_IF_ERROR(cfg.Validate());
  if (max_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch size must be positive, got ", max_batch));
  }
  if (par.slots <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("activation slots must be positive, got ", par.slots));
  }
  ShardLayout layout;
  if (par.tp != nullptr) {
    layout.tp_size = par.tp->size();
    layout.tp_rank = par.tp->rank();
    if (cfg.n_head % layout.tp_size != 0) {
      return absl::InvalidArgumentError(absl::StrCat("n_head (", cfg.n_head,
                                                     ") is not divisible by the tensor-parallel "
                                                     "degree ",
                                                     layout.tp_size));
    }
  }
  if (par.pp != nullptr) {
    layout.pp_size = par.pp->size();
    layout.pp_rank = par.pp->rank();
  }
  if (par.cp != nullptr && par.cp->size() > 1 && cfg.context % (2 * par.cp->size()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context parallelism cuts the context (", cfg.context,
        ") into 2 x cp = ", 2 * par.cp->size(), " equal chunks, which does not divide it"));
  }
  if (par.storage != DType::kF32 && par.storage != DType::kBF16) {
    return absl::InvalidArgumentError("activations are stored as fp32 or bf16");
  }
  if (par.master_host != nullptr &&
      (backend->device() == Device::kCpu || par.master_host->device() != Device::kCpu)) {
    return absl::InvalidArgumentError(
        "offloading the master weights needs a device backend (cuda or cuda-sim) and a host "
        "backend for them; on the CPU backend the device memory is host memory already");
  }
  if (par.offload_params && (par.master_host == nullptr || !training)) {
    return absl::InvalidArgumentError(
        "parameter offload needs host memory for the masters and a training model");
  }
  if (par.storage == DType::kBF16 && backend->device() == Device::kCpu) {
    return absl::InvalidArgumentError(
        "bf16 precision needs a device backend (cuda or cuda-sim); the CPU backend computes in "
        "fp32");
  }
  ASSIGN_OR_RETURN(ParameterTable table, ParameterTable::Create(GptParameterSpecs(cfg), layout));
  std::unique_ptr<Gpt> m(new Gpt(cfg, backend, max_batch, training, std::move(table), par));
  const int64_t multiple = std::max<int64_t>(1, par.buffer_multiple);
  m->buffer_floats_ = (m->table_.total_floats() + multiple - 1) / multiple * multiple;
  const size_t param_bytes = static_cast<size_t>(m->buffer_floats_) * sizeof(float);
  ASSIGN_OR_RETURN(m->weights_, m->master_backend_->Allocate(param_bytes));
  if (training) {
    Backend* grads_home = par.offload_params ? m->master_backend_ : backend;
    ASSIGN_OR_RETURN(m->grads_, grads_home->Allocate(param_bytes));
  }
  m->arena_sizes_ = LayoutActivations(cfg, layout, max_batch, cfg.context / m->cp_size(),
                                      m->activation_options(), Tensor(), nullptr);
  ASSIGN_OR_RETURN(m->arena_,
                   backend->Allocate(static_cast<size_t>(m->arena_sizes_.total_bytes())));
  if (m->copy_bytes() > 0) {
    Backend* copy_home = par.offload_params ? m->master_backend_ : backend;
    ASSIGN_OR_RETURN(m->copy_, copy_home->Allocate(static_cast<size_t>(m->copy_bytes())));
  }
  if (par.offload_params) {
    const Tensor source = m->copy_ != nullptr ? m->weight_copy() : m->weight_buffer();
    ASSIGN_OR_RETURN(m->stream_,
                     LayerStream::Create(backend, &m->table_, cfg, source, m->grad_buffer()));
    m->w_ = m->stream_->resident_weights();
    m->g_ = m->stream_->resident_grads();
    return m;
  }
  m->w_ =
      BindGptTensors(m->table_, m->copy_ != nullptr ? m->weight_copy() : m->weight_buffer(), cfg);
  if (training) m->g_ = BindGptTensors(m->table_, m->grad_buffer(), cfg);
  return m;
}

absl::Status Gpt::InitWeights(uint64_t seed) {
  std::vector<float> host(table_.total_floats());
  table_.Initialize(host.data(), seed);
  return SetWeights(host.data());
}

absl::Status Gpt::SetWeights(const float* host) {
  RETURN_IF_ERROR(CheckNotQuantized("SetWeights"));
  RETURN_IF_ERROR(master_backend_->CopyFromHost(weights(), host));
  return RoundWeightCopy(nullptr);
}

int64_t Gpt::copy_bytes() const {
  if (par_.storage == DType::kBF16) return buffer_floats_ * 2;
  return master_on_host() && !par_.offload_params ? buffer_floats_ * 4 : 0;
}

int64_t Gpt::weight_memory_bytes() const {
  if (stream_ != nullptr) return stream_->weight_bytes();
  return (master_on_host() ? 0 : buffer_floats_ * 4) + copy_bytes();
}

int64_t Gpt::grad_memory_bytes() const {
  if (!training_) return 0;
  return stream_ != nullptr ? stream_->grad_bytes() : buffer_floats_ * 4;
}

Tensor Gpt::weight_copy() const {
  if (copy_ == nullptr) return Tensor();
  const Device where = par_.offload_params ? master_device() : device();
  return par_.storage == DType::kBF16
             ? Tensor::BF16(static_cast<uint16_t*>(copy_.get()), {buffer_floats_}, where)
             : Tensor::F32(static_cast<float*>(copy_.get()), {buffer_floats_}, where);
}

absl::Status Gpt::RoundWeightCopy(const StochasticRounding* sr) {
  const Tensor copy = weight_copy(), master = weight_buffer();
  if (copy.empty()) {
    // The ops read the masters (or, streamed, layers of them).
  } else if (copy.dtype == DType::kF32) {
    RETURN_IF_ERROR(backend_->CopyFromHost(copy, master.data));
  } else {
    // bf16: rounded where the masters are; with optimizer offload on the
    // host, then one copy to the device (the host and device roundings are
    // the same bits).
    const bool staged = copy.device != master.device;
    std::vector<uint16_t> staging(staged ? buffer_floats_ : 0);
    const Tensor target =
        staged ? Tensor::BF16(staging.data(), {buffer_floats_}, master.device) : copy;
    for (int i = 0; i < table_.size(); ++i) {
      StochasticRounding r;
      if (sr != nullptr) r = {sr->seed, sr->step, table_.RoundingOffset(i, 0)};
      RETURN_IF_ERROR(master_backend_->RoundToBf16(table_.View(target, i), table_.View(master, i),
                                                   sr != nullptr ? &r : nullptr));
    }
    if (staged) RETURN_IF_ERROR(backend_->CopyFromHost(copy, staging.data()));
  }
  return WeightsChanged();
}

absl::Status Gpt::WeightsChanged() {
  return stream_ != nullptr ? stream_->RefreshResident() : absl::OkStatus();
}

absl::Status Gpt::FinishGrads() {
  return stream_ != nullptr ? stream_->FlushResidentGrads() : absl::OkStatus();
}

LinkTraffic Gpt::TakeLink() { return stream_ != nullptr ? stream_->TakeLink() : LinkTraffic{}; }

absl::Status Gpt::GetWeights(float* host) const {
  RETURN_IF_ERROR(CheckNotQuantized("GetWeights"));
  return master_backend_->CopyToHost(host, weights());
}

namespace {

// Calls copy(local, logical, n) for each row of local tensor i of `table`:
// n floats at offset `local` of the rank's buffer stand at offset `logical`
// of the whole model's (`whole`: the unsharded table).
template <typename Copy>
void ForEachLocalRow(const ParameterTable& table, const ParameterTable& whole, int i, Copy copy) {
  const ParamSpec& s = table.spec(i);
  const int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
  const std::vector<int64_t>& shape = table.local_shape(i);
  const int64_t local_cols = shape.size() == 2 ? shape[1] : 1;
  const int64_t base = whole.offset(table.logical_index(i));
  for (int64_t r = 0; r < table.numel(i) / local_cols; ++r) {
    copy(table.offset(i) + r * local_cols,
         base + table.LogicalRow(i, r) * cols + table.LogicalColumnStart(i), local_cols);
  }
}

}  // namespace

absl::Status Gpt::SetLogicalWeights(const std::vector<float>& whole_weights) {
  const ParameterTable whole(GptParameterSpecs(cfg_));
  if (static_cast<int64_t>(whole_weights.size()) != whole.total_floats()) {
    return absl::InvalidArgumentError(absl::StrCat("SetLogicalWeights: ", whole_weights.size(),
                                                   " floats, but the model has ",
                                                   whole.total_floats()));
  }
  std::vector<float> local(table_.total_floats());
  for (int i = 0; i < table_.size(); ++i) {
    ForEachLocalRow(table_, whole, i, [&](int64_t at, int64_t from, int64_t n) {
      std::copy_n(whole_weights.data() + from, n, local.data() + at);
    });
  }
  return SetWeights(local.data());
}

absl::Status Gpt::GetLogicalWeights(std::vector<float>* host) {
  std::vector<float> local(table_.total_floats());
  RETURN_IF_ERROR(GetWeights(local.data()));
  const ParameterTable whole(GptParameterSpecs(cfg_));
  host->assign(whole.total_floats(), 0.0f);
  // Each rank writes the elements it holds at their logical positions;
  // replicated tensors are written by TP rank 0 only and the tied embedding
  // by the first stage only, so one sum over both groups assembles all.
  for (int i = 0; i < table_.size(); ++i) {
    const ParamSpec& s = table_.spec(i);
    if (s.split == TpSplit::kReplicated && tp_rank() != 0) continue;
    if (table_.IsTiedCopy(i)) continue;
    ForEachLocalRow(table_, whole, i, [&](int64_t at, int64_t to, int64_t n) {
      std::copy_n(local.data() + at, n, host->data() + to);
    });
  }
  const Tensor all = Tensor::F32(host->data(), {whole.total_floats()}, Device::kCpu);
  for (Communicator* group : {par_.tp, par_.pp}) {
    if (group != nullptr && group->size() > 1) {
      RETURN_IF_ERROR(group->AllReduce(all, ReduceOp::kSum));
    }
  }
  return absl::OkStatus();
}

absl::Status Gpt::ZeroGrads() {
  if (!training_) return absl::FailedPreconditionError("model was created for inference only");
  RETURN_IF_ERROR(grads_backend()->Fill(grad_buffer(), 0.0f));
  return stream_ != nullptr ? stream_->ZeroGrads() : absl::OkStatus();
}

absl::Status Gpt::SetBatchShape(int B, int T) {
  const int R = cp_size();
  if (B <= 0 || B > max_batch_ || T <= 0 || T > cfg_.context / R) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", B, " x ", T,
                                                   " tokens exceeds the model's arena (",
                                                   max_batch_, " x ", cfg_.context / R, ")"));
  }
  if (R > 1 && T % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context parallelism: a rank's ", T, " tokens per sequence are not two equal chunks"));
  }
  const int tp = table_.layout().tp_size;
  if (par_.sequence_parallel && tp > 1 && int64_t{B} * T % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence parallelism splits a microbatch's ", B, " x ", T, " = ", int64_t{B} * T,
        " token rows over tp = ", tp, " ranks, which does not divide them"));
  }
  if (B != bound_B_ || T != bound_T_) {
    const Tensor arena =
        Tensor(arena_.get(), DType::kI8, {arena_sizes_.total_bytes()}, device());  // raw bytes
    LayoutActivations(cfg_, table_.layout(), B, T, activation_options(), arena, &acts_);
    bound_B_ = 0;  // until the positions are in place
    // Each token's position in its sequence: 0..T-1, or with context
    // parallelism where this rank's chunks stand (cp::ChunkPosition).
    const int r = par_.cp == nullptr ? 0 : par_.cp->rank();
    if (!acts_.positions.empty()) {
      std::vector<int32_t> positions(static_cast<size_t>(B) * T);
      for (size_t i = 0; i < positions.size(); ++i) {
        positions[i] = static_cast<int32_t>(cp::ChunkPosition(r, R, T, i % T));
      }
      RETURN_IF_ERROR(backend_->CopyFromHost(acts_.positions, positions.data()));
    }
    if (!acts_.ring_positions.empty()) {
      std::vector<int32_t> ring(static_cast<size_t>(R) * T);
      for (size_t i = 0; i < ring.size(); ++i) {
        ring[i] = static_cast<int32_t>(cp::ChunkPosition(static_cast<int>(i / T), R, T, i % T));
      }
      RETURN_IF_ERROR(backend_->CopyFromHost(acts_.ring_positions, ring.data()));
    }
    bound_B_ = B;
    bound_T_ = T;
  }
  return absl::OkStatus();
}

absl::Status Gpt::CheckSlot(int slot) const {
  if (slot >= 0 && slot < par_.slots) return absl::OkStatus();
  return absl::OutOfRangeError(
      absl::StrCat("activation slot ", slot, " outside [0, ", par_.slots, ")"));
}

int Gpt::tp_rank() const { return table_.layout().tp_rank; }

tp::Group Gpt::tp_group() const {
  tp::Group g(par_.tp);
  g.sequence_parallel = par_.sequence_parallel;
  g.whole = acts_.seq_whole;
  g.partial = acts_.seq_partial;
  return g;
}

absl::Status Gpt::ReduceSequenceGrads() {
  if (!training_) return absl::FailedPreconditionError("model was created for inference only");
  if (!tp_group().splits_sequence()) return absl::OkStatus();
  // The whole gradient buffer's views (on the host under parameter offload,
  // where the layers' gradients are).
  const GptTensors g = BindGptTensors(table_, grad_buffer(), cfg_);
  std::vector<Tensor> partial = {g.lnf_w, g.lnf_b};
  for (const LayerTensors& l : g.layers) {
    partial.insert(partial.end(), {l.ln1_w, l.ln1_b, l.ln2_w, l.ln2_b});
  }
  for (const Tensor& t : partial) {
    if (!t.empty()) RETURN_IF_ERROR(par_.tp->AllReduce(t, ReduceOp::kSum));
  }
  return absl::OkStatus();
}

int Gpt::first_layer() const {
  return StageLayers(cfg_.n_layer, table_.layout().pp_size, table_.layout().pp_rank).first;
}

int64_t Gpt::vocab_start() const {
  return int64_t{cfg_.padded_vocab()} / table_.layout().tp_size * tp_rank();
}

Tensor Gpt::StageInput(int slot) const {
  return slot >= 0 && slot < static_cast<int>(acts_.slots.size()) ? acts_.slots[slot].layers[0].x
                                                                  : Tensor();
}
Tensor Gpt::StageOutput() const { return acts_.stage_out; }
Tensor Gpt::OutputGrad() const { return acts_.grad_in; }
Tensor Gpt::InputGrad() const { return acts_.d_resid; }

ActivationOptions Gpt::activation_options() const {
  ActivationOptions o;
  o.backward = training_;
  o.slots = par_.slots;
  o.recompute = par_.recompute;
  o.storage = par_.storage;
  o.sequence_parallel = par_.sequence_parallel;
  o.context_parallel = cp_size();
  return o;
}

cp::RingTensors Gpt::ring_tensors(const LayerActivations& la) const {
  return {la.qkv, la.atty, la.lse, acts_.ring, acts_.ring_positions};
}

absl::Status Gpt::AttentionForward(const LayerActivations& la, int heads) {
  if (cp_size() > 1) return cp::RingAttentionForward(*backend_, *par_.cp, ring_tensors(la), heads);
  return backend_->AttentionForward(la.atty, la.lse, la.qkv, heads, cfg_.attention,
                                    acts_.attn_scratch);
}

absl::Status Gpt::AttentionBackward(const LayerActivations& la, int heads) {
  if (cp_size() > 1) {
    return cp::RingAttentionBackward(*backend_, *par_.cp, ring_tensors(la), acts_.dqkv, acts_.datty,
                                     heads);
  }
  return backend_->AttentionBackward(acts_.dqkv, acts_.datty, la.qkv, la.atty, la.lse, heads,
                                     cfg_.attention, acts_.attn_scratch);
}

absl::Status Gpt::LayerForward(int l, const LayerActivations& la, bool project) {
  Backend& be = *backend_;
  const LayerTensors& w = w_.layers[l];
  const int heads = cfg_.n_head / table_.layout().tp_size;
  const tp::Group group = tp_group();
  Tensor branch = acts_.branch;
  // The first LayerNorm without the residual add: x is already the sum (or
  // the stage input), and recomputation rebuilds it bit for bit.
  if (l == 0 || !project) {
    RETURN_IF_ERROR(be.ResidualLayerNormForward(Tensor(), la.ln1, la.ln1_mean, la.ln1_rstd, la.x,
                                                Tensor(), w.ln1_w, w.ln1_b));
  }
  {
    TraceSpan span(TraceTrack::kCompute, "matmul", "qkv matmul");
    ASSIGN_OR_RETURN(Tensor ln1, tp::EnterColumn(group, la.ln1));
    RETURN_IF_ERROR(tp::ColumnLinearForward(be, la.qkv, ln1, w.qkv_w, w.qkv_b));
  }
  {
    TraceSpan span(TraceTrack::kCompute, "attention", "attention");
    RETURN_IF_ERROR(AttentionForward(la, heads));
  }
  {
    TraceSpan span(TraceTrack::kCompute, "matmul", "proj matmul");
    RETURN_IF_ERROR(tp::RowLinearForward(be, group, branch, la.atty, w.proj_w, w.proj_b));
  }
  RETURN_IF_ERROR(be.ResidualLayerNormForward(la.resid_mid, la.ln2, la.ln2_mean, la.ln2_rstd, la.x,
                                              branch, w.ln2_w, w.ln2_b));
  {
    TraceSpan span(TraceTrack::kCompute, "matmul", "fc matmul");
    ASSIGN_OR_RETURN(Tensor ln2, tp::EnterColumn(group, la.ln2));
    RETURN_IF_ERROR(tp::ColumnLinearGeluForward(be, la.fch_gelu, la.fch, ln2, w.fc_w, w.fc_b));
  }
  if (!project) return absl::OkStatus();
  TraceSpan span(TraceTrack::kCompute, "matmul", "fcproj matmul");
  return tp::RowLinearForward(be, group, branch, la.fch_gelu, w.fcproj_w, w.fcproj_b);
}

absl::StatusOr<double> Gpt::Forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                                    int slot, float dloss) {
  RETURN_IF_ERROR(CheckNotQuantized("Forward"));
  RETURN_IF_ERROR(CheckSlot(slot));
  RETURN_IF_ERROR(SetBatchShape(B, T));
  SlotActivations& s = acts_.slots[slot];
  const int V = cfg_.vocab_size;
  // The host's part: every id checked, then staged to the device, before
  // any op runs.
  if (is_first_stage()) {
    for (int64_t i = 0; i < int64_t{B} * T; ++i) {
      if (tokens[i] < 0 || tokens[i] >= V) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", tokens[i], " at position ", i,
                                                       " is outside the vocabulary [0, ", V, ")"));
      }
    }
  }
  const bool with_loss = is_last_stage() && targets != nullptr;
  if (with_loss) {
    for (int64_t i = 0; i < int64_t{B} * T; ++i) {
      if (targets[i] < 0 || targets[i] >= V) {
        return absl::InvalidArgumentError(
            absl::StrCat("target id ", targets[i], " is outside the vocabulary [0, ", V, ")"));
      }
    }
  }
  if (is_first_stage()) RETURN_IF_ERROR(backend_->CopyFromHost(s.tokens, tokens));
  if (with_loss) RETURN_IF_ERROR(backend_->CopyFromHost(s.targets, targets));
  // One device holding the whole vocabulary fuses the loss with its
  // backward; a vocabulary split over ranks needs all-reduces between the
  // steps.
  s.loss_fused = with_loss && dloss != 0 && training_ && table_.layout().tp_size == 1;
  s.fused_dloss = dloss;

  auto ops = [&] { return ForwardOps(slot, with_loss, dloss); };
  // Graphs for the training passes (dloss != 0; evaluation runs eagerly):
  // the loss with its backward fused, or a stage before the last.
  if (use_graphs_ && dloss != 0 && (s.loss_fused || !is_last_stage())) {
    RETURN_IF_ERROR(
        RunGraphed({GraphPass::kForward, slot, B, T, std::bit_cast<uint32_t>(dloss)}, ops));
  } else {
    RETURN_IF_ERROR(ops());
  }
  if (!with_loss) return 0.0;
  std::vector<float> losses;
  RETURN_IF_ERROR(Losses(&losses, slot));
  double sum = 0.0;
  for (float x : losses) sum += x;
  return sum / static_cast<double>(losses.size());
}

absl::Status Gpt::ForwardOps(int slot, bool with_loss, float dloss) {
  Backend& be = *backend_;
  GptActivations& a = acts_;
  SlotActivations& s = a.slots[slot];
  // Tensor parallelism (src/parallel/tensor_parallel/layers.h): QKV and
  // MLP-up column-parallel, the projections row-parallel, the embedding and
  // the tied head vocabulary-parallel; with tp null these are plain layers.
  if (is_first_stage()) {
    TraceSpan span(TraceTrack::kCompute, "embedding", "embedding");
    RETURN_IF_ERROR(tp::VocabEmbeddingForward(be, tp_group(), s.layers[0].x, s.tokens, a.positions,
                                              w_.wte, w_.wpe, vocab_start()));
  }
  // Each layer's input x is the previous layer's resid_mid plus its MLP
  // branch, added by the fused LayerNorm that starts the layer (the stage's
  // first layer starts from its input as it is).
  const int n_layers = static_cast<int>(s.layers.size());
  Tensor resid_mid;  // of the layer before
  if (stream_ != nullptr) stream_->StartPass();
  for (int l = 0; l < n_layers; ++l) {
    TraceSpan span(TraceTrack::kCompute, "layer", "layer %d fwd", first_layer() + l);
    if (stream_ != nullptr) {
      ASSIGN_OR_RETURN(w_.layers[l], stream_->Weights(l, l + 1 < n_layers ? l + 1 : -1));
    }
    LayerActivations la = par_.recompute == Recompute::kLayer ? a.recompute : s.layers[l];
    la.x = s.layers[l].x;
    if (par_.recompute == Recompute::kGelu) la.fch_gelu = a.recompute.fch_gelu;
    if (l > 0) {
      RETURN_IF_ERROR(be.ResidualLayerNormForward(la.x, la.ln1, la.ln1_mean, la.ln1_rstd, resid_mid,
                                                  a.branch, w_.layers[l].ln1_w,
                                                  w_.layers[l].ln1_b));
    }
    RETURN_IF_ERROR(LayerForward(l, la, /*project=*/true));
    resid_mid = la.resid_mid;
  }
  if (!is_last_stage()) {
    // The next stage normalizes the residual stream; only the add is ours.
    return be.ResidualAdd(a.stage_out, resid_mid, a.branch);
  }
  {
    TraceSpan span(TraceTrack::kCompute, "head", "head");
    RETURN_IF_ERROR(be.ResidualLayerNormForward(s.x_final, s.lnf, s.lnf_mean, s.lnf_rstd, resid_mid,
                                                a.branch, w_.lnf_w, w_.lnf_b));
    // Tied head: logits = lnf @ wte^T, this rank's vocabulary columns only.
    ASSIGN_OR_RETURN(Tensor lnf, tp::EnterColumn(tp_group(), s.lnf));
    RETURN_IF_ERROR(tp::ColumnLinearForward(be, s.logits, lnf, w_.wte, Tensor()));
  }
  if (!with_loss) return absl::OkStatus();
  TraceSpan span(TraceTrack::kCompute, "loss", "loss");
  if (s.loss_fused) {
    return be.CrossEntropyFused(s.losses, s.lse, s.logits, s.targets, cfg_.vocab_size, dloss);
  }
  return tp::VocabCrossEntropyForward(be, par_.tp, s.losses,
                                      {s.row_max, s.sum_exp, s.target_logit, s.lse}, s.logits,
                                      s.targets, vocab_start(), cfg_.vocab_size);
}

absl::Status Gpt::UseGraphs(bool on) {
  if (on) {
    std::string why;
    if (!backend_->supports_graphs()) {
      why = absl::StrCat("the ", std::string(backend_->name()),
                         " backend has none (cuda and cuda-sim do)");
    } else if (table_.layout().tp_size > 1) {
      why = "tensor parallelism calls the communicator between the ops";
    } else if (cp_size() > 1) {
      why = "context parallelism calls the communicator between the ops";
    } else if (stream_ != nullptr) {
      why = "parameter offload streams each layer in between the ops";
    }
    if (!why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("cannot record graphs: ", why));
    }
  }
  use_graphs_ = on;
  if (!on) graphs_.clear();
  return absl::OkStatus();
}

absl::Status Gpt::RunGraphed(const GraphKey& key, const std::function<absl::Status()>& ops) {
  GraphEntry& entry = graphs_[key];
  if (entry.graph != nullptr && !entry.graph->valid()) entry.graph.reset();
  if (entry.graph == nullptr) {
    if (!entry.warmed_up) {
      // The first run of a pass sizes the backend's scratch: a capture
      // cannot allocate.
      entry.warmed_up = true;
      return ops();
    }
    ASSIGN_OR_RETURN(entry.graph, backend_->Capture(ops));
    ++graph_counts_.captures;
  }
  TraceSpan span(TraceTrack::kCompute, "graph", "%s graph",
                 key.pass == GraphPass::kForward    ? "forward"
                 : key.pass == GraphPass::kBackward ? "backward"
                                                    : "decode");
  ++graph_counts_.replays;
  return entry.graph->Replay();
}

absl::Status Gpt::Backward(float dloss, int slot,
                           const std::function<absl::Status(int64_t offset)>& grads_ready) {
  if (!training_) return absl::FailedPreconditionError("model was created for inference only");
  if (bound_B_ == 0) return absl::FailedPreconditionError("Backward called before Forward");
  RETURN_IF_ERROR(CheckSlot(slot));
  const SlotActivations& s = acts_.slots[slot];
  if (is_last_stage() && s.loss_fused && dloss != s.fused_dloss) {
    return absl::InvalidArgumentError(absl::StrCat("Backward with dloss ", dloss,
                                                   " after a fused loss of dloss ", s.fused_dloss));
  }
  auto ops = [&] { return BackwardOps(dloss, slot, grads_ready); };
  if (use_graphs_ && !grads_ready) {
    return RunGraphed(
        {GraphPass::kBackward, slot, bound_B_, bound_T_, std::bit_cast<uint32_t>(dloss)}, ops);
  }
  return ops();
}

absl::Status Gpt::BackwardOps(float dloss, int slot,
                              const std::function<absl::Status(int64_t offset)>& grads_ready) {
  Backend& be = *backend_;
  GptActivations& a = acts_;
  SlotActivations& s = a.slots[slot];
  const int heads = cfg_.n_head / table_.layout().tp_size;
  // With sequence parallelism the residual gradient and the LayerNorm
  // outputs are shards: each matmul's whole operand is gathered just before
  // it (EnterColumn; without, it is the tensor itself).
  const tp::Group group = tp_group();
  if (is_last_stage()) {
    if (!s.loss_fused) {  // (fused: the logits hold their gradient already)
      TraceSpan span(TraceTrack::kCompute, "loss", "loss bwd");
      RETURN_IF_ERROR(be.CrossEntropyBackward(s.logits, s.logits, s.targets, s.lse, vocab_start(),
                                              cfg_.vocab_size, dloss));
    }
    TraceSpan span(TraceTrack::kCompute, "head", "head bwd");
    ASSIGN_OR_RETURN(Tensor lnf, tp::EnterColumn(group, s.lnf));
    RETURN_IF_ERROR(
        tp::ColumnLinearBackward(be, group, a.d_ln, g_.wte, Tensor(), s.logits, lnf, w_.wte));
    // d_resid starts as the gradient of the final residual stream.
    RETURN_IF_ERROR(be.Fill(a.d_resid, 0.0f));
    RETURN_IF_ERROR(be.ResidualLayerNormBackward(a.d_resid, g_.lnf_w, g_.lnf_b, a.d_ln, s.x_final,
                                                 w_.lnf_w, s.lnf_mean, s.lnf_rstd));
  }
  // On other stages the gradient of the stage output has arrived in
  // grad_in; the backward works in d_resid.
  if (!is_last_stage()) RETURN_IF_ERROR(be.Copy(a.d_resid, a.grad_in));
  if (stream_ != nullptr) stream_->StartPass();
  for (int l = static_cast<int>(s.layers.size()) - 1; l >= 0; --l) {
    TraceSpan span(TraceTrack::kCompute, "layer", "layer %d bwd", first_layer() + l);
    if (stream_ != nullptr) {
      ASSIGN_OR_RETURN(w_.layers[l], stream_->Weights(l, l - 1));
      ASSIGN_OR_RETURN(g_.layers[l], stream_->BeginGrads(l));
    }
    const LayerTensors& w = w_.layers[l];
    const LayerTensors& g = g_.layers[l];
    LayerActivations la = s.layers[l];
    if (par_.recompute == Recompute::kLayer) {
      // Rebuild what the forward did not keep. The attention projection's
      // output lands in branch, which the backward no longer needs.
      TraceSpan recompute(TraceTrack::kCompute, "recompute", "recompute");
      la = a.recompute;
      la.x = s.layers[l].x;
      RETURN_IF_ERROR(LayerForward(l, la, /*project=*/false));
    } else if (par_.recompute == Recompute::kGelu) {
      // The GELU output, the down projection's input, from the kept fch.
      la.fch_gelu = a.recompute.fch_gelu;
      RETURN_IF_ERROR(be.GeluForward(la.fch_gelu, la.fch));
    }
    // MLP branch: d_resid is the gradient of its output.
    {
      TraceSpan mm(TraceTrack::kCompute, "matmul", "fcproj matmul bwd");
      ASSIGN_OR_RETURN(Tensor d_out, tp::EnterColumn(group, a.d_resid));
      // With the GELU's backward fused: dfch is the gradient of fch, the
      // GELU's input.
      RETURN_IF_ERROR(tp::RowLinearGeluBackward(be, a.dfch, g.fcproj_w, g.fcproj_b, d_out,
                                                la.fch_gelu, w.fcproj_w, la.fch));
    }
    {
      TraceSpan mm(TraceTrack::kCompute, "matmul", "fc matmul bwd");
      ASSIGN_OR_RETURN(Tensor ln2, tp::EnterColumn(group, la.ln2));
      RETURN_IF_ERROR(
          tp::ColumnLinearBackward(be, group, a.d_ln, g.fc_w, g.fc_b, a.dfch, ln2, w.fc_w));
    }
    RETURN_IF_ERROR(be.ResidualLayerNormBackward(a.d_resid, g.ln2_w, g.ln2_b, a.d_ln, la.resid_mid,
                                                 w.ln2_w, la.ln2_mean, la.ln2_rstd));
    // Attention branch.
    {
      TraceSpan mm(TraceTrack::kCompute, "matmul", "proj matmul bwd");
      ASSIGN_OR_RETURN(Tensor d_out, tp::EnterColumn(group, a.d_resid));
      RETURN_IF_ERROR(
          tp::RowLinearBackward(be, a.datty, g.proj_w, g.proj_b, d_out, la.atty, w.proj_w));
    }
    {
      TraceSpan attention(TraceTrack::kCompute, "attention", "attention bwd");
      RETURN_IF_ERROR(AttentionBackward(la, heads));
    }
    {
      TraceSpan mm(TraceTrack::kCompute, "matmul", "qkv matmul bwd");
      ASSIGN_OR_RETURN(Tensor ln1, tp::EnterColumn(group, la.ln1));
      RETURN_IF_ERROR(
          tp::ColumnLinearBackward(be, group, a.d_ln, g.qkv_w, g.qkv_b, a.dqkv, ln1, w.qkv_w));
    }
    RETURN_IF_ERROR(be.ResidualLayerNormBackward(a.d_resid, g.ln1_w, g.ln1_b, a.d_ln, la.x, w.ln1_w,
                                                 la.ln1_mean, la.ln1_rstd));
    if (stream_ != nullptr) RETURN_IF_ERROR(stream_->EndGrads(l));
    if (grads_ready) RETURN_IF_ERROR(grads_ready(LayerOffset(first_layer() + l)));
  }
  // d_resid is now the gradient of the stage input: a later stage hands it
  // back (InputGrad). The first stage ends at the embedding: d_resid is whole
  // on every TP rank (gathered, with sequence parallelism), each fills its
  // vocabulary rows, and the replicated position table gets the same
  // gradient everywhere.
  if (!is_first_stage()) return absl::OkStatus();
  TraceSpan span(TraceTrack::kCompute, "embedding", "embedding bwd");
  ASSIGN_OR_RETURN(Tensor d_out, tp::EnterColumn(group, a.d_resid));
  return be.EmbeddingBackward(g_.wte, g_.wpe, d_out, s.tokens, a.positions, vocab_start());
}

int64_t Gpt::LayerOffset(int layer) const {
  for (int i = 0; i < table_.size(); ++i) {
    if (table_.spec(i).layer == layer) return table_.offset(i);
  }
  return table_.total_floats();
}

absl::Status Gpt::LogitsAt(int b, int t, std::vector<float>* out) const {
  return RowAt("logits", acts_.slots[0].logits, cfg_.padded_vocab(), cfg_.vocab_size, b, t, out);
}

absl::Status Gpt::HiddenAt(int b, int t, std::vector<float>* out) const {
  return RowAt("hidden state", acts_.slots[0].lnf, cfg_.n_embd, cfg_.n_embd, b, t, out);
}

absl::Status Gpt::RowAt(const char* what, const Tensor& rows, int64_t stride, int64_t count, int b,
                        int t, std::vector<float>* out) const {
  if (b < 0 || b >= bound_B_ || t < 0 || t >= bound_T_) {
    return absl::OutOfRangeError(absl::StrCat("no ", what, " at (", b, ", ", t, ")"));
  }
  if (table_.layout().tp_size != 1 || table_.layout().pp_size != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("reading the ", what, " needs the whole model on one rank"));
  }
  out->resize(count);
  const Tensor row = rows.Slice((int64_t{b} * bound_T_ + t) * stride, {count});
  if (row.dtype == DType::kF32) return backend_->CopyToHost(out->data(), row);
  std::vector<bf16> bits(out->size());
  RETURN_IF_ERROR(backend_->CopyToHost(bits.data(), row));
  for (size_t i = 0; i < bits.size(); ++i) (*out)[i] = Bf16ToFloat(bits[i]);
  return absl::OkStatus();
}

absl::Status Gpt::Losses(std::vector<float>* out, int slot) const {
  if (slot < 0 || slot >= static_cast<int>(acts_.slots.size()) ||
      acts_.slots[slot].losses.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no losses in slot ", slot, " (only the last pipeline stage has them)"));
  }
  out->resize(acts_.slots[slot].losses.numel());
  return backend_->CopyToHost(out->data(), acts_.slots[slot].losses);
}

}  // namespace ladder
