// ladder generate: samples a continuation of a prompt from a trained model,
// through the serving engine (src/serve/engine.h) that `ladder serve` runs.
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "src/backend/backend_factory.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/inference_flags.h"
#include "src/cli/model_dir.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/serve/engine.h"
#include "src/serve/text_stream.h"

namespace ladder {
namespace {

struct GenerateFlags {
  std::string model, prompt = "\n", stop, device = "auto";
  FormatFlags formats;
  bool cuda_graph = false;
  DraftFlags draft;
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
  if (f.top_k < 0 || f.top_k > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--top-k must be in [0, ", std::numeric_limits<int>::max(), "], got ", f.top_k));
  }
  SamplingParams sp{f.temperature, static_cast<int>(f.top_k), f.top_p};
  RETURN_IF_ERROR(sp.Validate());
  ASSIGN_OR_RETURN(WeightFormat weights, ParseWeightFormat(f.formats.weights));
  EngineConfig ec;
  ASSIGN_OR_RETURN(ec.kv_format, ParseKvFormat(f.formats.kv));
  ASSIGN_OR_RETURN(ModelDir dir, LoadModelDir(f.model));
  const GptConfig& cfg = dir.model.config;
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  ASSIGN_OR_RETURN(auto model, CreateInferenceModel(dir.model, backend.get(), weights));
  ec.kv_blocks = KvBlockPool::BlocksFor(cfg.context);
  ASSIGN_OR_RETURN(std::unique_ptr<Gpt> draft,
                   LoadDraftModel(f.draft, backend.get(), weights, &ec));
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, model.get()));
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, draft.get()));
  RETURN_IF_ERROR(ApplyCudaGraphFlag(f.cuda_graph, model.get()));
  RETURN_IF_ERROR(ApplyCudaGraphFlag(f.cuda_graph, draft.get()));
  ASSIGN_OR_RETURN(auto engine, Engine::Create(model.get(), ec));
  // The text is printed as it streams: whole UTF-8 characters only, and
  // nothing from the stop string on.
  TextStream text(&dir.tokenizer, {f.stop});

  std::vector<int32_t> tokens = dir.tokenizer.Encode(f.prompt);
  std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
  // One request through the serving engine (paged KV cache). A request
  // cannot pass the context, so a longer generation continues with a new
  // request whose prompt is the last half context of the text so far (its
  // positions restart at 0), seeded on from the tokens already made.
  int64_t left = f.max_tokens;
  while (left > 0 && !text.stopped()) {
    const size_t keep = tokens.size() >= static_cast<size_t>(cfg.context)
                            ? static_cast<size_t>(cfg.context / 2)
                            : tokens.size();
    EngineRequest r;
    r.prompt.assign(tokens.end() - static_cast<int64_t>(keep), tokens.end());
    r.max_tokens = static_cast<int>(std::min<int64_t>(left, cfg.context - keep));
    r.sampling = sp;
    r.seed = static_cast<uint64_t>(f.seed) + static_cast<uint64_t>(f.max_tokens - left);
    ASSIGN_OR_RETURN(const int64_t id, engine->Submit(r));
    while (!engine->idle()) {
      ASSIGN_OR_RETURN(std::vector<EngineEvent> events, engine->Step());
      for (const EngineEvent& e : events) {
        if (text.stopped()) break;
        tokens.push_back(e.token);
        --left;
        const std::string delta = text.Push(e.token);
        std::fwrite(delta.data(), 1, delta.size(), stdout);
      }
      std::fflush(stdout);
      if (text.stopped() && !engine->idle()) RETURN_IF_ERROR(engine->Cancel(id));
    }
  }
  const std::string rest = text.Finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  if (f.cuda_graph) {
    const Gpt::GraphCounts graphs = model->graph_counts();
    std::fprintf(stderr, "cuda graphs: %lld recorded, %lld decode steps replayed\n",
                 static_cast<long long>(graphs.captures), static_cast<long long>(graphs.replays));
  }
  return absl::OkStatus();
}

}  // namespace

int GenerateCommand(int argc, char** argv) {
  GenerateFlags f;
  FlagSet flags("ladder generate", "Sample text from a trained model.");
  flags.String("model", &f.model,
               "run directory, checkpoint or model file of a trained model (required)");
  flags.String("prompt", &f.prompt, "text to continue");
  flags.Int("max-tokens", &f.max_tokens, "tokens to generate");
  flags.Double("temperature", &f.temperature, "softmax temperature; 0 = greedy");
  flags.Int("top-k", &f.top_k, "sample from the k most likely tokens; 0 = all");
  flags.Double("top-p", &f.top_p, "sample from the smallest set with this much probability");
  flags.Int("seed", &f.seed, "random seed of the sampler");
  AddFormatFlags(flags, &f.formats);
  AddDeviceFlag(flags, &f.device);
  flags.String("stop", &f.stop, "stop before this string", "none");
  AddDraftFlags(flags, &f.draft);
  AddCudaGraphFlag(flags, &f.cuda_graph);
  return RunCommand(flags, argc, argv, [&] { return Generate(f); });
}

}  // namespace ladder
