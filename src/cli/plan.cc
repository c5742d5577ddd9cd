// ladder plan: memory per rank, communication per step and axis, and the
// pipeline bubble of a training layout, predicted from the config alone
// (src/tools/plan.h has the formulas). Runs in one process, no MPI.
#include "src/tools/plan.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/cli/commands.h"
#include "src/cli/parallel_layout.h"
#include "src/core/flags.h"
#include "src/core/status.h"

namespace ladder {
namespace {

struct PlanFlags {
  std::string config, precision = "fp32";
  bool json = false;
  double mtbf_hours = 0, checkpoint_seconds = 0;
  int64_t largest_for = 0;  // --largest-layout's rank count; 0: plan the layout given
  double max_rank_memory_mib = 0;
  double link_gbps = 50;  // host-device link, GB/s
  LayoutFlags layout;
};

std::string Json(const Plan& p) {
  std::string out = absl::StrFormat(
      "{\"parameters\":%d,\"state_bytes_per_parameter\":%.4f,\"microbatches\":%d,"
      "\"micro_rows\":%d,\"bubble\":%.6f,\"stages\":[",
      p.parameters, p.state_bytes_per_parameter, p.microbatches, p.micro_rows, p.bubble);
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const StagePlan& s = p.stages[i];
    absl::StrAppendFormat(
        &out,
        "%s{\"stage\":%d,\"ranks\":[%d,%d],\"layers\":[%d,%d],\"slots\":%d,"
        "\"memory\":{\"weights\":%d,\"grads\":%d,\"optimizer\":%d,\"activations\":%d,"
        "\"total\":%d},\"comm_bytes\":{\"tensor\":%d,\"data\":%d,\"pipeline\":%d,"
        "\"embedding\":%d,\"context\":%d},\"tensor_wire_bytes\":%d%s}",
        i ? "," : "", s.stage, s.first_rank, s.last_rank, s.layers.first, s.layers.last, s.slots,
        s.weight_bytes, s.grad_bytes, s.optimizer_bytes, s.activation_bytes, s.memory_bytes(),
        s.tensor_bytes, s.data_bytes, s.pipeline_bytes, s.embedding_bytes, s.context_bytes,
        s.tensor_wire_bytes,
        p.layout.offload == Offload::kNone
            ? ""
            : absl::StrFormat(",\"host_bytes\":%d,\"link_bytes\":{\"to_host\":%d,\"to_device\":%d}",
                              s.host_bytes, s.link_to_host_bytes, s.link_to_device_bytes));
  }
  return out + "]}";
}

// 1.50 GiB, 12.0 MiB, 300 KiB: three significant figures in a binary unit;
// "-" for nothing.
std::string Bytes(double b) {
  if (b == 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat(b < 10 ? "%.2f %s" : b < 100 ? "%.1f %s" : "%.0f %s", b, units[u]);
}

absl::Status RunPlan(const PlanFlags& f) {
  if (f.config.empty()) return absl::InvalidArgumentError("missing --config FILE");
  if (!(f.link_gbps > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--link-gbps must be a positive bandwidth in GB/s, got ", f.link_gbps));
  }
  if (f.precision != "fp32" && f.precision != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--precision must be fp32 or bf16, got '", f.precision, "'"));
  }
  if (f.mtbf_hours < 0 || f.checkpoint_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mtbf-hours and --checkpoint-seconds must be >= 0, got ", f.mtbf_hours,
                     " and ", f.checkpoint_seconds));
  }
  if ((f.mtbf_hours > 0) != (f.checkpoint_seconds > 0)) {
    return absl::InvalidArgumentError(
        "--mtbf-hours and --checkpoint-seconds go together (the cost C as `ladder bench "
        "checkpoint` measures it)");
  }
  RETURN_IF_ERROR(CheckRankMemoryFlag(f.max_rank_memory_mib));
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  if (f.largest_for != 0) {
    // One line of flags for `ladder train`, read by the elastic supervisor.
    if (f.largest_for < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--largest-layout must be a positive rank count, got ", f.largest_for));
    }
    ASSIGN_OR_RETURN(LayoutFlags l, LargestLayout(rc, f.layout, static_cast<int>(f.largest_for)));
    // --sp comes last, and only for a job that asked for it: it turns off
    // with its tensor group, overriding the job's own flag.
    std::printf("--dp %lld --tp %lld --pp %lld --microbatches %lld%s%s\n",
                static_cast<long long>(l.dp), static_cast<long long>(l.tp),
                static_cast<long long>(l.pp), static_cast<long long>(l.microbatches),
                f.layout.sp ? (l.sp ? " --sp=true" : " --sp=false") : "",
                f.layout.cp > 1 ? absl::StrCat(" --cp ", l.cp).c_str() : "");
    return absl::OkStatus();
  }
  const LayoutFlags& lf = f.layout;
  RETURN_IF_ERROR(CheckLayout(rc, lf, static_cast<int>(lf.dp * lf.cp * lf.tp * lf.pp)));
  ASSIGN_OR_RETURN(const PlanLayout l,
                   ToPlanLayout(lf, f.precision == "bf16" ? DType::kBF16 : DType::kF32));
  ASSIGN_OR_RETURN(Plan p, MakePlan(rc, l));
  if (f.json) {
    std::printf("%s\n", Json(p).c_str());
    return absl::OkStatus();
  }
  const GptConfig& m = rc.model;
  const bool bf16 = l.storage == DType::kBF16;
  std::printf(
      "plan: %s, %.3gB parameters; dp %d x %stp %d%s x pp %d = %d ranks, ZeRO-%d, %s, %s%s\n",
      f.config.c_str(), p.parameters / 1e9, l.dp,
      l.cp > 1 ? absl::StrCat("cp ", l.cp, " x ").c_str() : "", l.tp,
      l.sp ? " (sequence parallel)" : "", l.pp, l.dp * l.cp * l.tp * l.pp, l.zero1 ? 1 : 0,
      pp::ScheduleName(l.schedule),
      bf16 ? "bf16 mixed precision (bf16 activations and weight copy; fp32 master "
             "weights, gradients and AdamW)"
           : "fp32",
      l.recompute == Recompute::kNone
          ? ""
          : absl::StrCat(", recomputing ", l.recompute == Recompute::kGelu
                                               ? "each layer's GELU output"
                                               : "each layer from its input")
                .c_str());
  std::printf("batch: %d microbatches of %d x %d tokens per DP rank and step%s\n", p.microbatches,
              p.micro_rows, m.context,
              l.cp > 1 ? absl::StrFormat(", %d of each sequence's tokens per ring rank (N below)",
                                         m.context / l.cp)
                             .c_str()
                       : "");
  if (l.offload == Offload::kParams) {
    std::printf(
        "model states on the device: the tensors outside the layers and two layers' slots, "
        "weights (%d bytes) and gradients (4), = %.2f bytes per model parameter per replica\n",
        bf16 ? 2 : 4, p.state_bytes_per_parameter);
  } else {
    std::printf(
        "model states%s: weights %d%s + gradients 4 + AdamW %s bytes per parameter%s = %.2f "
        "bytes per model parameter per replica%s\n",
        l.offload == Offload::kNone ? "" : " on the device",
        l.offload == Offload::kNone ? (bf16 ? 6 : 4) : (bf16 ? 2 : 4),
        l.offload == Offload::kNone ? (bf16 ? " (fp32 master, bf16 copy)" : "")
                                    : (bf16 ? " (the bf16 copy; the masters offloaded)"
                                            : " (the fp32 copy; the masters offloaded)"),
        l.offload == Offload::kNone ? "8 (m, v)" : "0 (offloaded)",
        l.zero1 && l.dp > 1
            ? absl::StrFormat(", the optimizer's over %d ZeRO-1 ranks", l.dp).c_str()
            : "",
        p.state_bytes_per_parameter,
        l.pp > 1 ? " (the tied embedding is held by both end stages)" : "");
  }
  std::printf(
      "activations: per layer and microbatch N x (%s + 12C/t) values at %d bytes and N x (NH/t "
      "+ %s) fp32 statistics%s, N = %d tokens, C = %d, NH = %d, t = %d; times the schedule's "
      "slots%s\n",
      l.sp ? "4C/t" : "4C", bf16 ? 2 : 4, l.sp ? "4/t" : "4",
      l.recompute == Recompute::kLayer
          ? " kept for the backward's recomputation: only N x C (the layer input)"
      : l.recompute == Recompute::kGelu ? ", less N x 4C/t (the GELU output, rebuilt)"
                                        : "",
      p.micro_rows * m.context / l.cp, m.n_embd, m.n_head, l.tp,
      l.sp ? "; plus two N x C buffers a block's gathered input and scattered output pass through"
           : "");
  std::printf("\n%-5s %-9s %-7s %5s %10s %10s %10s %11s %10s   %-10s %-10s %-10s %-10s %-10s\n",
              "stage", "ranks", "layers", "slots", "weights", "gradients", "optimizer",
              "activations", "total", "tensor/step", "data/step", "pipe/step", "embed/step",
              "ring/step");
  for (const StagePlan& s : p.stages) {
    std::printf("%-5d %-9s %-7s %5d %10s %10s %10s %11s %10s   %-11s %-10s %-10s %-10s %-10s\n",
                s.stage, absl::StrCat(s.first_rank, "-", s.last_rank).c_str(),
                absl::StrCat(s.layers.first, "-", s.layers.last - 1).c_str(), s.slots,
                Bytes(s.weight_bytes).c_str(), Bytes(s.grad_bytes).c_str(),
                Bytes(s.optimizer_bytes).c_str(), Bytes(s.activation_bytes).c_str(),
                Bytes(s.memory_bytes()).c_str(), Bytes(s.tensor_bytes).c_str(),
                Bytes(s.data_bytes).c_str(), Bytes(s.pipeline_bytes).c_str(),
                Bytes(s.embedding_bytes).c_str(), Bytes(s.context_bytes).c_str());
  }
  if (l.tp > 1) {
    std::printf(
        "\ntensor axis on the wire (ring algorithms: all-reduce 2(t-1)/t of its buffer, "
        "all-gather and reduce-scatter (t-1)/t), per rank and step:");
    for (const StagePlan& s : p.stages) {
      std::printf(" %sstage %d %s", s.stage > 0 ? "| " : "", s.stage,
                  Bytes(s.tensor_wire_bytes).c_str());
    }
    std::printf("\n");
  }
  if (l.offload != Offload::kNone) {
    // The link's time if nothing overlaps it: what offload adds to a step.
    std::printf(l.offload == Offload::kParams
                    ? "\nparameter offload: the fp32 masters, AdamW's m and v, the gradients and "
                      "the weights the ops read in host memory; each layer's weights come to the "
                      "device for its forward and backward, its gradient goes back and forth"
                    : "\noptimizer offload: the fp32 masters, AdamW's m and v and the staging in "
                      "host memory; per rank and step the gradients go to the host and the weight "
                      "copy to the device");
    for (const StagePlan& s : p.stages) {
      const double bytes = static_cast<double>(s.link_to_host_bytes + s.link_to_device_bytes);
      std::printf("\n  stage %d: host %s, link %s to host + %s to device = %.3f s at %.0f GB/s",
                  s.stage, Bytes(s.host_bytes).c_str(), Bytes(s.link_to_host_bytes).c_str(),
                  Bytes(s.link_to_device_bytes).c_str(), bytes / (f.link_gbps * 1e9), f.link_gbps);
    }
    std::printf("\n");
  }
  std::printf("\npipeline bubble: (P-1)/(M+P-1) = %.1f%% of each step (P = %d, M = %d)\n",
              100 * p.bubble, l.pp, p.microbatches);
  if (f.mtbf_hours > 0) {
    // Young/Daly: saving every T loses C/T to saving and, on average, T/2 of
    // work per failure; the sum is smallest at T = sqrt(2 C MTBF).
    const double mtbf = f.mtbf_hours * 3600, c = f.checkpoint_seconds;
    const double interval = std::sqrt(2 * c * mtbf);
    std::printf(
        "checkpoint interval (Young/Daly) sqrt(2 C MTBF) = %.0f s for C = %.2f s, MTBF = %.1f "
        "h: %.2f%% of the time saving plus %.2f%% lost to failures\n",
        interval, c, f.mtbf_hours, 100 * c / interval, 100 * interval / 2 / mtbf);
  }
  std::printf(
      "(every rank of a stage is alike; communication is the payload each rank passes to its "
      "collectives and messages per step, see docs/ARCHITECTURE.md)\n");
  // Last, so the table above shows where the memory goes.
  return CheckRankMemory(p, f.max_rank_memory_mib);
}

}  // namespace

int PlanCommand(int argc, char** argv) {
  PlanFlags f;
  FlagSet flags("ladder plan",
                "Predict memory per rank, communication per step and the pipeline bubble of a "
                "training layout, from the config alone.");
  flags.String("config", &f.config, "model and run config file (required)");
  AddLayoutFlags(flags, &f.layout);
  flags.String("precision", &f.precision,
               "fp32 (how ladder trains on the CPU) or bf16 (mixed precision: bf16 activations "
               "and weight copy, fp32 master weights, gradients and AdamW)");
  flags.Bool("json", &f.json, "print the plan as one JSON object");
  AddRankMemoryFlag(flags, &f.max_rank_memory_mib);
  flags.Double("link-gbps", &f.link_gbps,
               "host-device link bandwidth in gigabytes per second (PCIe 5.0 x16 moves about 50): "
               "the step time --offload's copies add");
  flags.Double("mtbf-hours", &f.mtbf_hours,
               "mean time between failures of the job: prints the Young/Daly checkpoint interval");
  flags.Double("checkpoint-seconds", &f.checkpoint_seconds,
               "the cost C of one checkpoint, as `ladder bench checkpoint` measures it");
  flags.Int("largest-layout", &f.largest_for,
            "print only the train flags (--dp --tp --pp --microbatches, and --sp=true|false "
            "for a job with --sp) of the largest layout "
            "of at most this many ranks that keeps the global batch: fewer DP replicas first, "
            "then a shorter pipeline, then smaller TP groups (the elastic supervisor's choice)");
  return RunCommand(flags, argc, argv, [&] { return RunPlan(f); });
}

}  // namespace ladder
