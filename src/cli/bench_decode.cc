// ladder bench decode: batch-1 decoding speed of a config's model (random
// weights: the speed does not depend on them) against its bound, the
// memory read bandwidth measured in the same run (between the steps) over
// the weight bytes each token must read. A decode step multiplies one
// token's activations by every weight matrix once, so it is memory-bound:
// this ratio says how close the KV-cached forward gets to the machine.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/cli/commands.h"
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
  std::string config;
  FormatFlags formats;
  int64_t tokens = 64;
};

absl::Status Run(const Flags& f) {
  if (f.config.empty()) return absl::InvalidArgumentError("missing --config FILE");
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  const GptConfig& cfg = rc.model;
  if (f.tokens < 1 || f.tokens >= cfg.context) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokens must be in [1, ", cfg.context - 1, "], got ", f.tokens));
  }
  ASSIGN_OR_RETURN(WeightFormat format, ParseWeightFormat(f.formats.weights));
  ASSIGN_OR_RETURN(KvFormat kv_format, ParseKvFormat(f.formats.kv));
  CpuBackend backend;
  ASSIGN_OR_RETURN(auto model, Gpt::Create(cfg, &backend, 1, /*training=*/false));
  RETURN_IF_ERROR(model->InitWeights(rc.seed));
  RETURN_IF_ERROR(model->QuantizeWeights(format));
  const int blocks = KvBlockPool::BlocksFor(cfg.context);
  KvBlockPool pool(blocks);
  ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(cfg, &backend, blocks, kv_format));
  ASSIGN_OR_RETURN(KvBlockPool::SequenceId seq, pool.AddSequence({1}));

  // Every weight is read once per token except the position table (one
  // row) and the token embedding's lookup (one row; the tied head reads all
  // of it). The KV cache's reads grow with the position; at these lengths
  // they are a few percent of the weights' and are left out of the bound.
  const int64_t weight_bytes = model->weight_bytes() - int64_t{cfg.context} * cfg.n_embd * 4;
  // The bandwidth is read before the steps and after every eighth.
  ReadBandwidthProbe probe(weight_bytes);
  probe.Measure(3);

  CachedTokens step;
  step.tokens = {1};
  step.seq = {0};
  step.pos = {0};
  step.max_blocks = blocks;
  std::vector<float> logits;
  std::vector<double> step_seconds;
  for (int64_t i = 0; i < f.tokens; ++i) {
    step.block_tables = pool.BlockTables({seq}, blocks);
    Timer t;
    RETURN_IF_ERROR(model->ForwardCached(step, cache, &logits));
    step_seconds.push_back(t.Seconds());
    RETURN_IF_ERROR(pool.Append(seq, {1}));
    step.pos = {step.pos[0] + 1};
    if (i % 8 == 7) probe.Measure();
  }
  const double bandwidth = probe.Measure();
  const double bound = bandwidth / static_cast<double>(weight_bytes);
  // The median step: a step that another process on the machine slowed
  // down says nothing about the decoder (the bandwidth is a best of several
  // reads for the same reason).
  std::nth_element(step_seconds.begin(), step_seconds.begin() + f.tokens / 2, step_seconds.end());
  const double tokens_per_s = 1.0 / step_seconds[f.tokens / 2];
  std::printf(
      "bench decode: %s, %.1fM parameters, %s weights read per token %.1f MiB, %s KV, batch 1, "
      "%lld tokens\n",
      f.config.c_str(), cfg.NumParameters() / 1e6, WeightFormatName(format),
      weight_bytes / 1048576.0, KvFormatName(kv_format), static_cast<long long>(f.tokens));
  std::printf("memory read bandwidth %.1f GB/s: bound %.1f tokens/s\n", bandwidth / 1e9, bound);
  std::printf("%.1f tokens/s (median step) = %.2f of the bound\n", tokens_per_s,
              tokens_per_s / bound);
  std::printf("{\"tokens_per_s\":%.2f,\"bound_tokens_per_s\":%.2f,\"fraction\":%.4f}\n",
              tokens_per_s, bound, tokens_per_s / bound);
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
  return RunCommand(flags, argc, argv, [&] { return Run(f); });
}

}  // namespace ladder
