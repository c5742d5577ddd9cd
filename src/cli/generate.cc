// ladder generate: samples a continuation of a prompt from a trained model.
// No KV cache yet: every new token reruns the forward over the last
// `context` tokens (the serving engine adds the cache).
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/cli/commands.h"
#include "src/cli/model_dir.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/model/gpt.h"
#include "src/serve/kv_blocks.h"
#include "src/serve/sampler.h"

namespace ladder {
namespace {

struct GenerateFlags {
  std::string model, prompt = "\n";
  int64_t max_tokens = 200, top_k = 0, seed = 1;
  double temperature = 1.0, top_p = 1.0;
};

absl::Status Generate(const GenerateFlags& f) {
  if (f.model.empty()) return absl::InvalidArgumentError("missing --model DIR");
  if (f.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-tokens must be >= 0, got ", f.max_tokens));
  }
  if (f.prompt.empty()) return absl::InvalidArgumentError("--prompt must not be empty");
  SamplingParams sp{f.temperature, static_cast<int>(f.top_k), f.top_p};
  RETURN_IF_ERROR(sp.Validate());
  ASSIGN_OR_RETURN(ModelDir dir, LoadModelDir(f.model));
  const GptConfig& cfg = dir.model.config;
  CpuBackend backend;
  ASSIGN_OR_RETURN(auto model, Gpt::Create(cfg, &backend, 1, /*training=*/false));
  RETURN_IF_ERROR(model->SetWeights(dir.model.weights.data()));

  std::vector<int32_t> tokens = dir.tokenizer.Encode(f.prompt);
  std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
  PhiloxStream rng(static_cast<uint64_t>(f.seed), kSamplingStream);

  // Decoding with a paged KV cache (src/model/kv_cache.h): the prompt is
  // prefilled once, then each step runs only the newest token. When the
  // sequence reaches the context length, the last half of it becomes a new
  // prompt (positions restart at 0).
  const int blocks = KvBlockPool::BlocksFor(cfg.context);
  KvBlockPool pool(blocks);
  ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(cfg, &backend, blocks));
  KvBlockPool::SequenceId seq = -1;
  CachedTokens step;
  auto restart = [&](absl::Span<const int32_t> window) -> absl::Status {
    if (seq >= 0) RETURN_IF_ERROR(pool.Free(seq));
    ASSIGN_OR_RETURN(seq, pool.AddSequence(window));
    step.tokens.assign(window.begin(), window.end());
    step.seq.assign(window.size(), 0);
    step.pos.resize(window.size());
    for (size_t i = 0; i < window.size(); ++i) step.pos[i] = static_cast<int32_t>(i);
    return absl::OkStatus();
  };
  const size_t first = tokens.size() > static_cast<size_t>(cfg.context)
                           ? tokens.size() - static_cast<size_t>(cfg.context / 2)
                           : 0;
  RETURN_IF_ERROR(restart(absl::MakeConstSpan(tokens).subspan(first)));
  std::vector<float> logits;
  for (int64_t i = 0; i < f.max_tokens; ++i) {
    step.max_blocks = blocks;
    step.block_tables = pool.BlockTables({seq}, blocks);
    RETURN_IF_ERROR(model->ForwardCached(step, cache, &logits));
    const std::vector<float> last(logits.end() - cfg.vocab_size, logits.end());
    const int32_t next = SampleToken(last, sp, &rng);
    tokens.push_back(next);
    // A token's bytes may end mid-way through a UTF-8 character; the next
    // token's bytes complete it, so the byte stream printed is exact.
    const std::string& bytes = dir.tokenizer.TokenBytes(next);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
    const int32_t position = step.pos.back() + 1;
    if (position >= cfg.context) {
      RETURN_IF_ERROR(restart(absl::MakeConstSpan(tokens).subspan(
          tokens.size() - static_cast<size_t>(cfg.context / 2))));
    } else {
      RETURN_IF_ERROR(pool.Append(seq, {next}));
      step.tokens = {next};
      step.seq = {0};
      step.pos = {position};
    }
  }
  std::fputc('\n', stdout);
  return absl::OkStatus();
}

}  // namespace

int GenerateCommand(int argc, char** argv) {
  GenerateFlags f;
  FlagSet flags("ladder generate", "Sample text from a trained model directory.");
  flags.String("model", &f.model, "model directory written by 'ladder train' (required)");
  flags.String("prompt", &f.prompt, "text to continue");
  flags.Int("max-tokens", &f.max_tokens, "tokens to generate");
  flags.Double("temperature", &f.temperature, "softmax temperature; 0 = greedy");
  flags.Int("top-k", &f.top_k, "sample from the k most likely tokens; 0 = all");
  flags.Double("top-p", &f.top_p, "sample from the smallest set with this much probability");
  flags.Int("seed", &f.seed, "random seed of the sampler");
  return RunCommand(flags, argc, argv, [&] { return Generate(f); });
}

}  // namespace ladder
