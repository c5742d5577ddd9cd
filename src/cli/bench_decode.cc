// ladder bench decode: batch-1 decoding speed of a config's model (random
// weights: the speed does not depend on them) against its bound, the
// memory read bandwidth measured in the same run over the weight bytes each
// token must read. A decode step multiplies one token's activations by
// every weight matrix once, so it is memory-bound: this ratio says how
// close the KV-cached forward gets to the machine. On a shared machine the
// bandwidth others leave changes from one step to the next, so every step
// is timed between two reads of a buffer as large as the weights and
// compared with the faster of them (TimeAgainstBandwidth); the figures are
// medians over the steps. Each step decodes greedily on the device and
// feeds its token to the next, as the serving engine does.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/backend_factory.h"
#include "src/backend/cpu/blas_kernels.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/inference_flags.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"
#include "src/model/weight_format.h"
#include "src/serve/kv_blocks.h"
#include "src/tools/ceiling.h"
#include "src/train/run_config.h"

namespace ladder {
namespace {

struct Flags {
  std::string config, device = "auto";
  FormatFlags formats;
  int64_t tokens = 64;
  bool cuda_graph = false;
};

absl::Status Run(const Flags& f) {
  if (f.config.empty()) return absl::InvalidArgumentError("missing --config FILE");
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  const GptConfig& cfg = rc.model;
  if (f.tokens < 2 || f.tokens >= cfg.context) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens must be in [2, ", cfg.context - 1, "], got ", f.tokens));
  }
  ASSIGN_OR_RETURN(WeightFormat format, ParseWeightFormat(f.formats.weights));
  ASSIGN_OR_RETURN(KvFormat kv_format, ParseKvFormat(f.formats.kv));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  ASSIGN_OR_RETURN(auto model, Gpt::Create(cfg, backend.get(), 1, /*training=*/false));
  RETURN_IF_ERROR(model->InitWeights(rc.seed));
  RETURN_IF_ERROR(model->QuantizeWeights(format));
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, model.get()));
  RETURN_IF_ERROR(ApplyCudaGraphFlag(f.cuda_graph, model.get()));
  const int blocks = KvBlockPool::BlocksFor(cfg.context);
  KvBlockPool pool(blocks);
  ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(cfg, backend.get(), blocks, kv_format));
  ASSIGN_OR_RETURN(KvBlockPool::SequenceId seq, pool.AddSequence({1}));

  // Every weight is read once per token except the position table (one
  // row) and the token embedding's lookup (one row; the tied head reads all
  // of it). The KV cache's reads grow with the position; at these lengths
  // they are a few percent of the weights' and are left out of the bound.
  const int64_t weight_bytes = model->weight_bytes() - int64_t{cfg.context} * cfg.n_embd * 4;
  ReadBandwidthProbe probe(weight_bytes);

  CachedTokens step;
  step.tokens = {1};
  step.seq = {0};
  step.pos = {0};
  step.max_blocks = blocks;
  // Greedy, drawn where the logits are (ForwardSample): a step copies one
  // id back, as the serving engine's does, and feeds it to the next.
  const TokenSampleSpec greedy{0, 0.0, 0, 1.0, 0.0};
  std::vector<int32_t> next;
  auto decode_one = [&]() -> absl::Status {
    step.block_tables = pool.BlockTables({seq}, blocks);
    RETURN_IF_ERROR(model->ForwardSample(step, cache, {&greedy, 1}, &next));
    RETURN_IF_ERROR(pool.Append(seq, {next[0]}));
    step.tokens = {next[0]};
    step.pos = {step.pos[0] + 1};
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(decode_one());  // warm-up
  // With graphs the second step records: untimed too.
  if (f.cuda_graph) RETURN_IF_ERROR(decode_one());
  PairedBandwidth paired;
  RETURN_IF_ERROR(TimeAgainstBandwidth(probe, weight_bytes, static_cast<int>(f.tokens) - 1,
                                       decode_one, &paired));
  const double bandwidth = paired.bandwidth;
  const double bound = bandwidth / static_cast<double>(weight_bytes);
  const double tokens_per_s = 1.0 / paired.seconds;
  std::printf(
      "bench decode: %s, %.1fM parameters, %s weights read per token %.1f MiB, %s KV, %s "
      "activations, batch 1, %lld tokens\n",
      f.config.c_str(), cfg.NumParameters() / 1e6, WeightFormatName(format),
      weight_bytes / 1048576.0, KvFormatName(kv_format), f.formats.activations.c_str(),
      static_cast<long long>(f.tokens));
  if (f.cuda_graph) {
    const Gpt::GraphCounts graphs = model->graph_counts();
    std::printf("cuda graphs: %lld recorded, %lld steps replayed\n",
                static_cast<long long>(graphs.captures), static_cast<long long>(graphs.replays));
  }
  std::printf("kernels: %s; ladder's own: %s\n", BlasSummary().c_str(), CpuIsaName(ActiveCpuIsa()));
  std::printf("memory read bandwidth %.1f GB/s (median): bound %.1f tokens/s\n", bandwidth / 1e9,
              bound);
  std::printf(
      "%.1f tokens/s (median step); each step against the bandwidth of its moment: "
      "%.2f of the bound (median)\n",
      tokens_per_s, paired.fraction);
  std::printf("{\"tokens_per_s\":%.2f,\"bound_tokens_per_s\":%.2f,\"fraction\":%.4f}\n",
              tokens_per_s, bound, paired.fraction);
  return absl::OkStatus();
}

}  // namespace

int BenchDecodeCommand(int argc, char** argv) {
  Flags f;
  FlagSet flags("ladder bench decode",
                "Batch-1 KV-cached decoding tokens/s of a config's model against memory "
                "bandwidth over weight bytes, measured in the same run. The last line is JSON.");
  flags.String("config", &f.config, "model config (required)");
  flags.Int("tokens", &f.tokens, "tokens to decode (less than the context)");
  AddFormatFlags(flags, &f.formats);
  AddDeviceFlag(flags, &f.device);
  AddCudaGraphFlag(flags, &f.cuda_graph);
  return RunCommand(flags, argc, argv, [&] { return Run(f); });
}

}  // namespace ladder
