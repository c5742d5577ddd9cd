// The plan: what a training layout costs each rank, predicted from the
// config alone, before anything runs. `ladder plan` prints it; a test holds
// it to what a run measures.
//
// Memory per rank (bytes), with e the activation width (4 in fp32, 2 in
// bf16; src/model/gpt.h GptParallel::storage):
//   weights      local parameters x 4 (fp32), or x 6 in bf16: the fp32
//                master weights and the bf16 copy the ops read
//   gradients    local parameters x 4 (always fp32), plus the reduced 1/D
//                shard under ZeRO-1 (4 each)
//   optimizer    AdamW's m and v: 8 per updated parameter (ZeRO-1 updates 1/D)
// With optimizer offload (src/train/offload.h) the device keeps the weights
// the ops read (local parameters x e) and the gradients; the host holds the
// fp32 masters (x 4), m and v (8 per updated parameter), the gradients'
// staging (4 per updated parameter) and a bf16 copy's staging (x 2). The
// link carries, per step, the updated gradients to the host (x 4) and the
// copy to the device (local parameters x e). Parameter offload
// (src/model/layer_stream.h) keeps on the device only the tensors outside
// the layers and two layers' slots, weights (x e) and gradients (x 4); the
// host adds the gradient buffer and a bf16 copy; per step the link carries,
// with l a layer's parameters, 2 M L_s l e + (M - 1) L_s l 4 + resident e to
// the device and M L_s l 4 + resident 4 to the host.
//   activations  the activation arena, measured by its own layout function
//                (src/model/activations.h: per layer and microbatch
//                N (4C + 12C/t) activations at e bytes and N (NH/t + 4) fp32
//                statistics, or N C activations with recomputation, times the
//                schedule's slots; each tensor 16-byte aligned)
// Before activations that is 16 bytes per parameter in fp32 (4+4+8), the
// textbook figure for Adam, and 18 in bf16 (6+4+8: fp32 gradients, as
// Megatron's "main grads", cost 2 bytes more than bf16 ones would and keep
// microbatch and data-parallel sums out of bf16); ZeRO-1 divides the
// optimizer's share by D.
//
// Communication per rank and step, as the communicators count it (comm.h:
// the full buffer of each call), with N = tokens per microbatch, M
// microbatches, L_s the stage's layers:
//   tensor     per microbatch: forward N C on the first stage (embedding),
//              2 L_s N C, 3N on the last (cross-entropy statistics, fp32);
//              backward 2 L_s N C (+ L_s N C recomputing), N C on the last
//              (head); all x e; plus 4 (gradient norm).
//              With sequence parallelism (all-gathers and reduce-scatters,
//              each counted as its N C buffer): forward N C on the first
//              stage, 4 L_s N C, N C + 3N on the last; backward N C on the
//              first stage (the embedding's gathered gradient), 6 L_s N C
//              (+ 3 L_s N C recomputing), 2 N C on the last; plus the
//              LayerNorm gradients' all-reduce once a step, (4 L_s (+ 2 on
//              the last stage)) C x 4
//   data       4 (loss) + all gradients x 4, or ZeRO-1: reduce-scatter and
//              all-gather of the fp32 buffer (2 x buffer x 4), the bf16
//              copy's all-gather in bf16 (buffer x 2), + 8
//   pipeline   per microbatch N C e (N C e / t with sequence parallelism)
//              for each hand-over: activation in and
//              gradient out except on the first stage, activation out and
//              gradient in except on the last; plus 12 (loss, norm)
//   embedding  the tied embedding's local gradient x 4, first and last stage
//   context    with R > 1 ring ranks, per layer and microbatch 6 blocks
//              of N 3C/t e (the packed qkv; 8 recomputing layers):
//              the forward's hops and the backward's with the gradients
// With context parallelism N is a rank's share, B T / R tokens, and the
// data group is dp x cp ranks (the weights' replicas; ZeRO-1 over all).
// and the textbook bubble (P-1)/(M+P-1).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "src/model/activations.h"
#include "src/model/parameters.h"
#include "src/parallel/pipeline_parallel/schedule.h"
#include "src/train/offload.h"
#include "src/train/run_config.h"

namespace ladder {

struct PlanLayout {
  int dp = 1, tp = 1, pp = 1;
  bool sp = false;  // sequence parallelism (tp > 1)
  int cp = 1;       // context parallelism
  bool zero1 = false;
  int microbatches = 0;  // 0: the config's accumulation steps
  pp::Schedule schedule = pp::Schedule::k1F1B;
  Recompute recompute = Recompute::kNone;
  DType storage = DType::kF32;  // activations and the weights ops read (fp32 or bf16)
  Offload offload = Offload::kNone;
};

// One pipeline stage; all its D x T ranks cost the same.
struct StagePlan {
  int stage = 0;
  int first_rank = 0, last_rank = 0;  // world ranks [first, last]
  LayerRange layers{0, 0};
  int64_t local_parameters = 0;  // one rank's
  int slots = 1;
  int64_t weight_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, activation_bytes = 0;
  int64_t tensor_bytes = 0, data_bytes = 0, pipeline_bytes = 0, embedding_bytes = 0,
          context_bytes = 0;
  // What tensor_bytes puts on the wire per rank with ring algorithms
  // (comm.h): the fair measure of sequence parallelism against without.
  int64_t tensor_wire_bytes = 0;
  // Optimizer offload: host memory and the link's bytes per step each way.
  int64_t host_bytes = 0, link_to_host_bytes = 0, link_to_device_bytes = 0;
  int64_t memory_bytes() const {
    return weight_bytes + grad_bytes + optimizer_bytes + activation_bytes;
  }
};

struct Plan {
  PlanLayout layout;
  int microbatches = 1, micro_rows = 1;
  int64_t parameters = 0;                // the whole model's
  // Device weights + gradients + optimizer, one replica.
  double state_bytes_per_parameter = 0;
  double bubble = 0;                     // textbook
  std::vector<StagePlan> stages;
};

// InvalidArgument for a layout that does not fit the config (the same rules
// as the trainer's).
absl::StatusOr<Plan> MakePlan(const RunConfig& rc, const PlanLayout& layout);

// OK when every rank's predicted memory fits `max_mib` MiB (0: no cap);
// else InvalidArgument naming the largest rank's total and where it goes,
// and what would shrink it.
absl::Status CheckRankMemory(const Plan& plan, double max_mib);

}  // namespace ladder
