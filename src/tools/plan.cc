#include "src/tools/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/core/status.h"
#include "src/model/activations.h"

namespace ladder {

absl::StatusOr<Plan> MakePlan(const RunConfig& rc, const PlanLayout& l) {
  RETURN_IF_ERROR(rc.Validate());
  Plan plan;
  plan.layout = l;
  const int D = l.dp, Tp = l.tp, P = l.pp;
  const int64_t G = int64_t{rc.batch_size} * rc.AccumulationSteps();
  plan.microbatches = l.microbatches > 0 ? l.microbatches : rc.AccumulationSteps();
  const int M = plan.microbatches;
  if (D < 1 || Tp < 1 || P < 1 || G % (int64_t{D} * M) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the global batch of ", G,
                                                   " sequences does not split into dp (", D,
                                                   ") x microbatches (", M, ") equal parts"));
  }
  plan.micro_rows = static_cast<int>(G / (int64_t{D} * M));
  plan.parameters = rc.model.NumParameters();
  plan.bubble = pp::TextbookBubble(P, M);

  const bool bf16 = l.storage == DType::kBF16;
  const int64_t e = bf16 ? 2 : 4;  // activation bytes (gradients and statistics stay fp32)
  // The data group: every rank holding the same weights, dp x cp of them
  // (ZeRO-1 shards over all of it).
  const int R = l.cp, shards = D * R;
  const bool zero = l.zero1 && shards > 1;
  const int64_t C = rc.model.n_embd, T = rc.model.context / R;  // a rank's tokens per sequence
  const int64_t N = int64_t{plan.micro_rows} * T;
  double state_bytes = 0;
  for (int s = 0; s < P; ++s) {
    StagePlan sp;
    sp.stage = s;
    sp.first_rank = s * shards * Tp;
    sp.last_rank = (s + 1) * shards * Tp - 1;
    ShardLayout shard{Tp, 0, P, s};
    ASSIGN_OR_RETURN(ParameterTable table,
                     ParameterTable::Create(GptParameterSpecs(rc.model), shard));
    sp.layers = StageLayers(rc.model.n_layer, P, s);
    sp.local_parameters = table.total_floats();
    // ZeRO-1 pads the flat buffers to 16 x shards floats and cuts them.
    const int64_t multiple = zero ? 16 * shards : 1;
    const int64_t buffer = (table.total_floats() + multiple - 1) / multiple * multiple;
    const int64_t updated = zero ? buffer / shards : table.total_floats();
    sp.weight_bytes = buffer * (bf16 ? 6 : 4);
    sp.grad_bytes = buffer * 4 + (zero ? updated * 4 : 0);
    sp.optimizer_bytes = updated * 8;
    const int64_t Ls = sp.layers.last - sp.layers.first;
    if (l.offload == Offload::kParams) {
      // The layers stream through two slots (src/model/layer_stream.h): the
      // device keeps the resident tensors and two layers, weights and
      // gradients; the host the masters, moments, gradients (and the ZeRO-1
      // shard) and a bf16 copy. Per microbatch every layer's weights come
      // twice, its gradient goes back once and comes once after the first;
      // the resident tensors' gradients go once a step, their weights come
      // after the update.
      int64_t layer = 0;
      for (int i = 0; i < table.size(); ++i) {
        if (table.spec(i).layer == sp.layers.first) layer += table.numel(i);
      }
      const int64_t resident = table.total_floats() - Ls * layer;
      sp.weight_bytes = (resident + 2 * layer) * e;
      sp.grad_bytes = (resident + 2 * layer) * 4;
      sp.optimizer_bytes = 0;
      sp.host_bytes = buffer * 4 + updated * 8 + buffer * 4 + (zero ? updated * 4 : 0) +
                      (bf16 ? buffer * 2 : 0);
      sp.link_to_device_bytes = M * 2 * Ls * layer * e + (M - 1) * Ls * layer * 4 + resident * e;
      sp.link_to_host_bytes = M * Ls * layer * 4 + resident * 4;
    }
    if (l.offload == Offload::kOptimizer) {
      // The masters and moments move to the host, beside the staging of
      // the gradients and of a bf16 copy; the device keeps the copy.
      sp.weight_bytes = buffer * e;
      sp.optimizer_bytes = 0;
      sp.host_bytes = buffer * 4 + updated * 8 + updated * 4 + (bf16 ? buffer * 2 : 0);
      sp.link_to_host_bytes = updated * 4;
      sp.link_to_device_bytes = buffer * e;
    }
    sp.slots = pp::ActivationSlots(l.schedule, P, s, M);
    ActivationOptions options;
    options.slots = sp.slots;
    options.recompute = l.recompute;
    options.storage = l.storage;
    options.sequence_parallel = l.sp;
    options.context_parallel = l.cp;
    const ActivationSizes acts =
        LayoutActivations(rc.model, shard, plan.micro_rows, T, options, Tensor(), nullptr);
    sp.activation_bytes = acts.total_bytes();

    const bool first = s == 0, last = s == P - 1;
    const bool recompute = l.recompute == Recompute::kLayer;
    if (Tp > 1) {
      // All-reduced: the cross-entropy statistics and the gradient norm
      // (and with sequence parallelism the LayerNorm gradients); the
      // activations are all-reduced, or with sequence parallelism gathered
      // and scattered: each block's input and output forward and backward,
      // and its LayerNorm output gathered again for the weight gradient
      // (tensor_parallel/layers.h).
      int64_t reduced = M * (last ? 3 * N * 4 : 0) + 4, gathered = 0;
      if (!l.sp) {
        reduced += M * e *
                   ((first ? N * C : 0) + 4 * Ls * N * C + (recompute ? Ls * N * C : 0) +
                    (last ? N * C : 0));
      } else {
        gathered = M * e *
                   ((first ? 2 * N * C : 0) + 10 * Ls * N * C + (recompute ? 3 * Ls * N * C : 0) +
                    (last ? 3 * N * C : 0));
        reduced += (4 * Ls + (last ? 2 : 0)) * C * 4;
      }
      sp.tensor_bytes = reduced + gathered;
      // Ring algorithms: an all-reduce sends 2(t-1)/t of its buffer, an
      // all-gather or reduce-scatter (t-1)/t.
      sp.tensor_wire_bytes = (2 * reduced + gathered) * (Tp - 1) / Tp;
    }
    if (R > 1) {
      // Per layer: R - 1 hops of a qkv block forward; in the backward the
      // first hop a block, R - 2 a block and its gradient, the last a
      // gradient (SendRecv counts what it sends and receives); recomputing
      // a layer runs the forward ring again.
      const int64_t block = N * 3 * (C / Tp) * e;
      const int64_t per_layer = (recompute ? 4 : 2) * (R - 1) * block + 4 * (R - 1) * block;
      sp.context_bytes = M * Ls * per_layer;
    }
    if (shards > 1) {
      sp.data_bytes =
          4 + (zero ? 2 * buffer * 4 + (bf16 ? buffer * 2 : 0) + 8 : table.total_floats() * 4);
    }
    if (P > 1) {
      const int64_t handed = l.sp ? N / Tp : N;  // rows of each hand-over
      sp.pipeline_bytes = int64_t{M} * handed * C * e * ((first ? 0 : 2) + (last ? 0 : 2)) + 12;
      if (first || last) {
        ASSIGN_OR_RETURN(int wte, table.Find("wte"));
        sp.embedding_bytes = table.numel(wte) * 4;
      }
    }
    // One replica's model states: every stage's TP ranks (a rank's average
    // over the DP group under ZeRO-1, which holds 1/D of the optimizer).
    state_bytes += static_cast<double>(Tp) * (sp.weight_bytes + sp.grad_bytes + sp.optimizer_bytes);
    plan.stages.push_back(sp);
  }
  plan.state_bytes_per_parameter = state_bytes / static_cast<double>(plan.parameters);
  return plan;
}

absl::Status CheckRankMemory(const Plan& plan, double max_mib) {
  if (max_mib <= 0) return absl::OkStatus();
  const StagePlan* top = &plan.stages[0];
  for (const StagePlan& s : plan.stages) {
    if (s.memory_bytes() > top->memory_bytes()) top = &s;
  }
  const double mib = 1.0 / (1 << 20);
  if (top->memory_bytes() * mib <= max_mib) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "a rank of stage %d needs %.1f MiB (weights %.1f, gradients %.1f, optimizer %.1f, "
      "activations %.1f), over --max-rank-memory %.1f MiB; --cp, --sp, --recompute, --tp, --pp, "
      "--offload optimizer, "
      "--zero 1 or smaller microbatches divide it (ladder plan shows each)",
      top->stage, top->memory_bytes() * mib, top->weight_bytes * mib, top->grad_bytes * mib,
      top->optimizer_bytes * mib, top->activation_bytes * mib, max_mib));
}

}  // namespace ladder
