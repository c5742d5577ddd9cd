// ladder bench serve: serving latency and throughput of the engine
// (src/serve/engine.h) under a generated load, in process (no HTTP, so the
// figures are the engine's). Requests arrive open-loop at a Poisson rate
// (--rate) or closed-loop, a new one as soon as one finishes (--concurrency);
// prompt and output lengths are uniform in [mean / 2, 3 mean / 2]; all of it
// is drawn from --seed, so every run of an invocation sees the same load.
//
// Every token is timestamped when its step returns. From those: time to
// first token (arrival to first token), time per output token (per request,
// (last - first) / (tokens - 1)) and the inter-token gaps, each at p50 and
// p99, and output tokens/s and requests/s over the run. With --speculate K
// the same load also runs without the draft, for the speedup; with
// --compare-batch1 it also runs one request at a time, for what batching
// buys. With --shared-prefix N every prompt starts with the same N tokens
// (a system prompt) before its own; the load then also runs with prefix
// caching off, for what the cache saves in time to first token. (Each run's
// untimed warm-up request leaves that prefix in the cache, as a server that
// has served it before would have it.) The last line is JSON.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/inference_flags.h"
#include "src/cli/model_dir.h"
#include "src/core/flags.h"
#include "src/core/philox.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/model/gpt.h"
#include "src/model/kv_cache.h"
#include "src/model/weight_format.h"
#include "src/serve/engine.h"
#include "src/serve/kv_blocks.h"
#include "src/train/run_config.h"

namespace ladder {
namespace {

struct Flags {
  std::string model, config, draft, draft_config, device = "auto";
  FormatFlags formats;
  int64_t requests = 32, concurrency = 0, prompt_tokens = 64, output_tokens = 64;
  int64_t speculate = 0, max_batch_tokens = 512, seed = 1, shared_prefix = 0;
  double rate = 0, temperature = 0;
  bool compare_batch1 = false, no_prefix_cache = false, cuda_graph = false;
};

struct Workload {
  std::vector<EngineRequest> requests;
  std::vector<double> arrivals;  // seconds from the start (open loop only)
};

// Nearest-rank percentile of `v` (q in [0, 1]); 0 for no values.
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

struct Figures {
  int64_t tokens = 0;
  double seconds = 0;
  double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0, itl_p50 = 0, itl_p99 = 0;
  EngineStats stats;
  double tokens_per_s() const { return tokens / seconds; }
};

Workload MakeWorkload(const Flags& f, int vocab) {
  PhiloxStream rng(static_cast<uint64_t>(f.seed), kSyntheticDataStream + 1);
  // Uniform in [mean / 2, 3 mean / 2], at least 1.
  auto length = [&rng](int64_t mean) {
    const int64_t lo = std::max<int64_t>(1, mean / 2), hi = std::max(lo, 3 * mean / 2);
    return static_cast<int>(lo + rng.NextU32() % (hi - lo + 1));
  };
  auto random_tokens = [&rng, vocab](std::vector<int32_t>* tokens, size_t from) {
    for (size_t k = from; k < tokens->size(); ++k) {
      (*tokens)[k] = static_cast<int32_t>(rng.NextU32() % vocab);
    }
  };
  std::vector<int32_t> prefix(static_cast<size_t>(f.shared_prefix));
  random_tokens(&prefix, 0);
  Workload w;
  double t = 0;
  for (int64_t i = 0; i < f.requests; ++i) {
    EngineRequest r;
    r.prompt = prefix;
    r.prompt.resize(prefix.size() + length(f.prompt_tokens));
    random_tokens(&r.prompt, prefix.size());
    r.max_tokens = length(f.output_tokens);
    r.sampling.temperature = f.temperature;
    r.seed = static_cast<uint64_t>(f.seed) + static_cast<uint64_t>(i);
    w.requests.push_back(std::move(r));
    // Poisson arrivals: exponential gaps of mean 1 / rate.
    if (f.rate > 0) t += -std::log(static_cast<double>(rng.NextUniform())) / f.rate;
    w.arrivals.push_back(t);
  }
  return w;
}

// Open loop: requests beyond this many in flight queue in the engine.
constexpr int kOpenLoopRunning = 64;

// Runs the whole workload through a fresh engine: at its arrival times when
// `open_loop`, else `concurrency` requests in flight. The cache holds every
// request that may run at once at its longest.
absl::StatusOr<Figures> RunLoad(Gpt* target, EngineConfig cfg, const Workload& w, bool open_loop,
                                int concurrency) {
  int max_len = 0;
  for (const EngineRequest& r : w.requests) {
    max_len = std::max(max_len, static_cast<int>(r.prompt.size()) + r.max_tokens);
  }
  const int in_flight =
      open_loop ? std::min(kOpenLoopRunning, static_cast<int>(w.requests.size())) : concurrency;
  cfg.max_running = in_flight;
  cfg.kv_blocks = in_flight * KvBlockPool::BlocksFor(max_len);
  ASSIGN_OR_RETURN(auto engine, Engine::Create(target, cfg));
  {  // Warm up (threads, first allocations), untimed.
    EngineRequest warm = w.requests[0];
    warm.max_tokens = 2;
    RETURN_IF_ERROR(engine->Submit(warm).status());
    while (!engine->idle()) RETURN_IF_ERROR(engine->Step().status());
  }
  const EngineStats before = engine->stats();
  const size_t n = w.requests.size();
  std::vector<double> arrival(n, 0);
  std::vector<std::vector<double>> times(n);
  std::map<int64_t, size_t> index;  // engine id -> request
  size_t next = 0, done = 0;
  int running = 0;
  Timer clock;
  while (done < n) {
    const double now = clock.Seconds();
    while (next < n && (open_loop ? w.arrivals[next] <= now : running < concurrency)) {
      ASSIGN_OR_RETURN(const int64_t id, engine->Submit(w.requests[next]));
      index[id] = next;
      arrival[next] = open_loop ? w.arrivals[next] : now;
      ++next;
      ++running;
    }
    if (engine->idle()) {  // open loop, nothing in flight: wait for the next arrival
      std::this_thread::sleep_for(std::chrono::duration<double>(w.arrivals[next] - now));
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<EngineEvent> events, engine->Step());
    const double t = clock.Seconds();
    for (const EngineEvent& e : events) {
      const size_t i = index[e.request];
      times[i].push_back(t);
      if (e.finished) {
        ++done;
        --running;
      }
    }
  }
  Figures fig;
  std::vector<double> ttft, tpot, itl;
  double end = 0;
  for (size_t i = 0; i < n; ++i) {
    fig.tokens += static_cast<int64_t>(times[i].size());
    end = std::max(end, times[i].back());
    ttft.push_back(times[i].front() - arrival[i]);
    if (times[i].size() > 1) {
      tpot.push_back((times[i].back() - times[i].front()) / (times[i].size() - 1));
    }
    for (size_t k = 1; k < times[i].size(); ++k) itl.push_back(times[i][k] - times[i][k - 1]);
  }
  fig.seconds = end;
  fig.ttft_p50 = Percentile(ttft, 0.5);
  fig.ttft_p99 = Percentile(ttft, 0.99);
  fig.tpot_p50 = Percentile(tpot, 0.5);
  fig.tpot_p99 = Percentile(tpot, 0.99);
  fig.itl_p50 = Percentile(itl, 0.5);
  fig.itl_p99 = Percentile(itl, 0.99);
  const EngineStats& s = engine->stats();
  fig.stats.proposed = s.proposed - before.proposed;
  fig.stats.accepted = s.accepted - before.accepted;
  fig.stats.target_forwards = s.target_forwards - before.target_forwards;
  fig.stats.draft_forwards = s.draft_forwards - before.draft_forwards;
  fig.stats.prompt_tokens_cached = s.prompt_tokens_cached - before.prompt_tokens_cached;
  return fig;
}

void Print(const std::string& name, const Figures& f) {
  std::printf(
      "%-12s %6lld tokens in %7.2f s: %8.1f tokens/s; TTFT p50 %7.1f p99 %7.1f ms; TPOT p50 %6.1f "
      "p99 %6.1f ms; ITL p50 %6.1f p99 %6.1f ms\n",
      name.c_str(), static_cast<long long>(f.tokens), f.seconds, f.tokens_per_s(), 1e3 * f.ttft_p50,
      1e3 * f.ttft_p99, 1e3 * f.tpot_p50, 1e3 * f.tpot_p99, 1e3 * f.itl_p50, 1e3 * f.itl_p99);
}

// A model from --model PATH or random weights from --config FILE (the
// config's seed), in `format`. `what` names the flags in errors.
absl::StatusOr<std::unique_ptr<Gpt>> LoadModel(const std::string& path, const std::string& config,
                                               const std::string& what, WeightFormat format,
                                               Backend* backend) {
  if (path.empty() == config.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("give exactly one of ", what));
  }
  if (!path.empty()) {
    ASSIGN_OR_RETURN(ModelDir dir, LoadModelDir(path));
    return CreateInferenceModel(dir.model, backend, format);
  }
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(config));
  ASSIGN_OR_RETURN(auto model, Gpt::Create(rc.model, backend, 1, /*training=*/false));
  RETURN_IF_ERROR(model->InitWeights(rc.seed));
  RETURN_IF_ERROR(model->QuantizeWeights(format));
  return model;
}

absl::Status Run(const Flags& f) {
  if ((f.rate > 0) == (f.concurrency > 0)) {
    return absl::InvalidArgumentError("give exactly one of --rate R > 0 or --concurrency C > 0");
  }
  if (f.rate < 0 || f.concurrency < 0) {
    return absl::InvalidArgumentError("--rate and --concurrency must be positive");
  }
  if (f.requests < 1 || f.prompt_tokens < 1 || f.output_tokens < 1) {
    return absl::InvalidArgumentError(
        "--requests, --prompt-tokens and --output-tokens must be positive");
  }
  if (f.shared_prefix < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shared-prefix must be >= 0, got ", f.shared_prefix));
  }
  if (f.speculate < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--speculate must be >= 0, got ", f.speculate));
  }
  const bool has_draft = !f.draft.empty() || !f.draft_config.empty();
  if ((f.speculate > 0) != has_draft) {
    return absl::InvalidArgumentError(
        "--speculate K > 0 and a draft (--draft PATH or --draft-config FILE) go together");
  }
  ASSIGN_OR_RETURN(WeightFormat format, ParseWeightFormat(f.formats.weights));
  EngineConfig cfg;
  ASSIGN_OR_RETURN(cfg.kv_format, ParseKvFormat(f.formats.kv));
  cfg.max_batch_tokens = static_cast<int>(f.max_batch_tokens);
  cfg.prefix_cache = !f.no_prefix_cache;
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  ASSIGN_OR_RETURN(auto target, LoadModel(f.model, f.config, "--model PATH or --config FILE",
                                          format, backend.get()));
  const GptConfig& c = target->config();
  const int64_t longest = f.shared_prefix + std::max<int64_t>(1, 3 * f.prompt_tokens / 2) +
                          std::max<int64_t>(1, 3 * f.output_tokens / 2);
  if (longest > c.context) {
    return absl::InvalidArgumentError(
        absl::StrCat("the longest request (--shared-prefix plus 3/2 of --prompt-tokens plus 3/2 of "
                     "--output-tokens, ",
                     longest, " tokens) must fit the model's context of ", c.context));
  }
  std::unique_ptr<Gpt> draft;
  if (has_draft) {
    ASSIGN_OR_RETURN(
        draft, LoadModel(f.draft, f.draft_config, "--draft PATH or --draft-config FILE", format,
                         backend.get()));
  }
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, target.get()));
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, draft.get()));
  RETURN_IF_ERROR(ApplyCudaGraphFlag(f.cuda_graph, target.get()));
  RETURN_IF_ERROR(ApplyCudaGraphFlag(f.cuda_graph, draft.get()));
  const Workload w = MakeWorkload(f, c.vocab_size);
  const bool open_loop = f.rate > 0;
  const int concurrency = static_cast<int>(f.concurrency);
  std::printf(
      "bench serve: %.1fM parameters, %s weights, %s KV, %s activations, %lld requests, %s, "
      "prompts %lld shared + ~%lld tokens, outputs ~%lld tokens, temperature %g, prefix cache "
      "%s, cuda graphs %s\n",
      c.NumParameters() / 1e6, WeightFormatName(format), KvFormatName(cfg.kv_format),
      f.formats.activations.c_str(), static_cast<long long>(f.requests),
      open_loop ? absl::StrFormat("Poisson arrivals at %g/s", f.rate).c_str()
                : absl::StrFormat("%d concurrent", concurrency).c_str(),
      static_cast<long long>(f.shared_prefix), static_cast<long long>(f.prompt_tokens),
      static_cast<long long>(f.output_tokens), f.temperature, cfg.prefix_cache ? "on" : "off",
      f.cuda_graph ? "on" : "off");
  std::fflush(stdout);

  ASSIGN_OR_RETURN(const Figures base, RunLoad(target.get(), cfg, w, open_loop, concurrency));
  Print("target", base);
  std::fflush(stdout);
  Figures main = base;
  EngineConfig main_cfg = cfg;
  std::string json;
  if (draft != nullptr) {
    main_cfg.draft = draft.get();
    main_cfg.speculate = static_cast<int>(f.speculate);
    ASSIGN_OR_RETURN(main, RunLoad(target.get(), main_cfg, w, open_loop, concurrency));
    const double acceptance = main.stats.proposed > 0
                                  ? static_cast<double>(main.stats.accepted) / main.stats.proposed
                                  : 0.0;
    Print(absl::StrCat("speculate ", f.speculate), main);
    std::printf(
        "draft %.1fM parameters: acceptance %.3f (%lld of %lld proposals), %lld target and %lld "
        "draft forwards, speedup %.2fx over the target alone\n",
        draft->config().NumParameters() / 1e6, acceptance,
        static_cast<long long>(main.stats.accepted), static_cast<long long>(main.stats.proposed),
        static_cast<long long>(main.stats.target_forwards),
        static_cast<long long>(main.stats.draft_forwards),
        main.tokens_per_s() / base.tokens_per_s());
    json += absl::StrFormat(
        ",\"speculate\":%d,\"acceptance\":%.4f,\"baseline_output_tokens_per_s\":%.2f,"
        "\"speedup\":%.3f",
        f.speculate, acceptance, base.tokens_per_s(), main.tokens_per_s() / base.tokens_per_s());
  }
  if (f.shared_prefix > 0 && main_cfg.prefix_cache) {
    EngineConfig uncached = main_cfg;
    uncached.prefix_cache = false;
    ASSIGN_OR_RETURN(const Figures off, RunLoad(target.get(), uncached, w, open_loop, concurrency));
    Print("uncached", off);
    int64_t prompt_tokens = 0;
    for (const EngineRequest& r : w.requests)
      prompt_tokens += static_cast<int64_t>(r.prompt.size());
    const double ratio = off.ttft_p50 / main.ttft_p50;
    std::printf(
        "prefix cache: %lld of %lld prompt tokens from the cache; TTFT p50 %.1f ms against %.1f "
        "ms without it: %.2fx lower\n",
        static_cast<long long>(main.stats.prompt_tokens_cached),
        static_cast<long long>(prompt_tokens), 1e3 * main.ttft_p50, 1e3 * off.ttft_p50, ratio);
    json += absl::StrFormat(
        ",\"shared_prefix\":%d,\"prompt_tokens\":%d,\"prompt_tokens_cached\":%d,"
        "\"no_cache_ttft_p50_ms\":%.3f,\"no_cache_ttft_p99_ms\":%.3f,"
        "\"prefix_cache_ttft_ratio\":%.3f",
        f.shared_prefix, prompt_tokens, main.stats.prompt_tokens_cached, 1e3 * off.ttft_p50,
        1e3 * off.ttft_p99, ratio);
  }
  if (f.compare_batch1) {
    ASSIGN_OR_RETURN(const Figures one, RunLoad(target.get(), cfg, w, /*open_loop=*/false, 1));
    Print("batch 1", one);
    std::printf("batched / batch 1 output tokens/s: %.2fx\n",
                base.tokens_per_s() / one.tokens_per_s());
    json += absl::StrFormat(",\"batch1_output_tokens_per_s\":%.2f,\"batch1_ratio\":%.3f",
                            one.tokens_per_s(), base.tokens_per_s() / one.tokens_per_s());
  }
  std::printf(
      "{\"requests\":%lld,\"output_tokens\":%lld,\"seconds\":%.3f,\"output_tokens_per_s\":%.2f,"
      "\"requests_per_s\":%.3f,\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f,\"tpot_p50_ms\":%.3f,"
      "\"tpot_p99_ms\":%.3f,\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f%s}\n",
      static_cast<long long>(f.requests), static_cast<long long>(main.tokens), main.seconds,
      main.tokens_per_s(), f.requests / main.seconds, 1e3 * main.ttft_p50, 1e3 * main.ttft_p99,
      1e3 * main.tpot_p50, 1e3 * main.tpot_p99, 1e3 * main.itl_p50, 1e3 * main.itl_p99,
      json.c_str());
  return absl::OkStatus();
}

}  // namespace

int BenchServeCommand(int argc, char** argv) {
  Flags f;
  FlagSet flags("ladder bench serve",
                "Serving latency (TTFT, TPOT, inter-token) and throughput of the engine under a "
                "generated load, in process; with a draft, the speculative speedup. The last "
                "line is JSON.");
  flags.String("model", &f.model, "trained model: run directory, checkpoint or model file");
  flags.String("config", &f.config, "model config, random weights (instead of --model)");
  AddFormatFlags(flags, &f.formats);
  AddDeviceFlag(flags, &f.device);
  flags.Int("requests", &f.requests, "requests in the load");
  flags.Double("rate", &f.rate, "open loop: Poisson arrivals, requests per second");
  flags.Int("concurrency", &f.concurrency, "closed loop: requests in flight");
  flags.Int("prompt-tokens", &f.prompt_tokens, "mean prompt length (uniform in [m/2, 3m/2])");
  flags.Int("output-tokens", &f.output_tokens, "mean output length (uniform in [m/2, 3m/2])");
  flags.Double("temperature", &f.temperature, "sampling temperature (0: greedy)");
  flags.String("draft", &f.draft, "draft model for speculative decoding");
  flags.String("draft-config", &f.draft_config, "draft config, random weights");
  flags.Int("speculate", &f.speculate, "draft tokens per step (needs a draft)");
  flags.Int("max-batch-tokens", &f.max_batch_tokens, "tokens per engine step");
  flags.Int("seed", &f.seed, "seed of the load (lengths, prompts, arrivals, sampling)");
  flags.Bool("compare-batch1", &f.compare_batch1,
             "also run the load one request at a time and print the throughput ratio");
  flags.Int("shared-prefix", &f.shared_prefix,
            "tokens every prompt starts with (before its own --prompt-tokens); also runs the "
            "load without the prefix cache and prints the TTFT ratio");
  AddPrefixCacheFlag(flags, &f.no_prefix_cache);
  AddCudaGraphFlag(flags, &f.cuda_graph);
  return RunCommand(flags, argc, argv, [&] { return Run(f); });
}

}  // namespace ladder
