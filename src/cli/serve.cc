// ladder serve: an OpenAI-compatible HTTP server (docs/serving.md) over the
// continuous-batching engine (src/serve/engine_loop.h, http_server.h).
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/backend_factory.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/inference_flags.h"
#include "src/cli/model_dir.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/serve/engine_loop.h"
#include "src/serve/http_server.h"

namespace ladder {
namespace {

constexpr int64_t kDefaultKvCapBytes = int64_t{1} << 30;

struct ServeFlags {
  std::string model, host = "127.0.0.1", api_key, model_name, device = "auto";
  FormatFlags formats;
  DraftFlags draft;
  bool no_prefix_cache = false;
  int64_t port = 8080, kv_tokens = 0, max_batch_tokens = 256, max_running = 64, max_waiting = 256,
          max_body_kb = 1024;
};

std::string MiB(int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

absl::Status Serve(const ServeFlags& f) {
  if (f.model.empty()) return absl::InvalidArgumentError("missing --model PATH");
  auto positive = [](const char* name, int64_t v, int64_t most) -> absl::Status {
    if (v < 1 || v > most) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be in [1, ", most, "], got ", v));
    }
    return absl::OkStatus();
  };
  if (f.port < 0 || f.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port must be in [0, 65535], got ", f.port));
  }
  RETURN_IF_ERROR(positive("max-batch-tokens", f.max_batch_tokens, 1 << 20));
  RETURN_IF_ERROR(positive("max-running", f.max_running, 4096));
  RETURN_IF_ERROR(positive("max-waiting", f.max_waiting, 1 << 20));
  RETURN_IF_ERROR(positive("max-body-kb", f.max_body_kb, 1 << 20));
  if (f.kv_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-tokens must be >= 0, got ", f.kv_tokens));
  }
  ASSIGN_OR_RETURN(WeightFormat weights, ParseWeightFormat(f.formats.weights));
  EngineLoop::Options lo;
  ASSIGN_OR_RETURN(lo.engine.kv_format, ParseKvFormat(f.formats.kv));
  ASSIGN_OR_RETURN(ModelDir dir, LoadModelDir(f.model));
  const GptConfig& cfg = dir.model.config;

  // The cache: by default enough for max_running full contexts, within 1 GiB.
  const int64_t per_token = KvCache::BytesPerToken(cfg, lo.engine.kv_format);
  int64_t kv_tokens = f.kv_tokens;
  if (kv_tokens == 0) {
    kv_tokens = std::min<int64_t>(f.max_running * cfg.context, kDefaultKvCapBytes / per_token);
    kv_tokens = std::max<int64_t>(kv_tokens, cfg.context);
  }
  if (kv_tokens < cfg.context) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-tokens must hold at least one context (",
                                                   cfg.context, " tokens), got ", kv_tokens));
  }
  if (KvBlockPool::BlocksFor(kv_tokens) > (1 << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-tokens is too large: ", kv_tokens));
  }
  lo.engine.kv_blocks = KvBlockPool::BlocksFor(kv_tokens);
  lo.engine.max_batch_tokens = static_cast<int>(f.max_batch_tokens);
  lo.engine.max_running = static_cast<int>(f.max_running);
  lo.engine.prefix_cache = !f.no_prefix_cache;
  lo.max_waiting = static_cast<int>(f.max_waiting);

  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  ASSIGN_OR_RETURN(auto model, CreateInferenceModel(dir.model, backend.get(), weights));
  ASSIGN_OR_RETURN(std::unique_ptr<Gpt> draft,
                   LoadDraftModel(f.draft, backend.get(), weights, &lo.engine));
  ASSIGN_OR_RETURN(auto loop, EngineLoop::Create(model.get(), lo));

  ServerOptions so;
  so.host = f.host;
  so.port = static_cast<int>(f.port);
  so.api_key = f.api_key;
  so.max_body_bytes = static_cast<size_t>(f.max_body_kb) * 1024;
  so.threads = static_cast<int>(std::max<int64_t>(64, f.max_running + 16));
  so.model_name = f.model_name.empty() ? f.model : f.model_name;
  ASSIGN_OR_RETURN(auto server, HttpServer::Create(so, loop.get(), &dir.tokenizer, cfg));

  const int64_t tokens = int64_t{lo.engine.kv_blocks} * kBlockTokens;
  std::fprintf(stderr,
               "ladder serve: model %s (%lld parameters, weights %s %s), KV %s %lld tokens (%s), "
               "prefix cache %s, listening on http://%s:%d\n",
               so.model_name.c_str(), static_cast<long long>(cfg.NumParameters()),
               WeightFormatName(weights), MiB(model->weight_bytes()).c_str(),
               KvFormatName(lo.engine.kv_format), static_cast<long long>(tokens),
               MiB(tokens * per_token).c_str(), lo.engine.prefix_cache ? "on" : "off",
               so.host.c_str(), server->port());
  if (draft) {
    std::fprintf(stderr,
                 "ladder serve: draft %s (%lld parameters), %lld tokens proposed per step\n",
                 f.draft.model.c_str(), static_cast<long long>(draft->config().NumParameters()),
                 static_cast<long long>(f.draft.speculate));
  }
  std::fflush(stderr);
  RETURN_IF_ERROR(ServeUntilSignal(server.get()));
  server.reset();
  loop.reset();
  std::fprintf(stderr, "ladder serve: drained and stopped\n");
  return absl::OkStatus();
}

}  // namespace

int ServeCommand(int argc, char** argv) {
  ServeFlags f;
  FlagSet flags("ladder serve", "Serve a trained model over an OpenAI-compatible HTTP API.");
  flags.String("model", &f.model, "run directory, checkpoint or model file (required)");
  flags.String("host", &f.host, "address to listen on");
  flags.Int("port", &f.port, "port to listen on; 0 = any free port (printed at startup)");
  flags.String("api-key", &f.api_key, "require 'Authorization: Bearer KEY' on /v1/*", "none");
  AddFormatFlags(flags, &f.formats);
  AddDeviceFlag(flags, &f.device);
  flags.Int("kv-tokens", &f.kv_tokens, "KV cache capacity in tokens",
            "max-running full contexts, at most 1 GiB");
  flags.Int("max-batch-tokens", &f.max_batch_tokens, "tokens per engine step");
  flags.Int("max-running", &f.max_running, "requests decoding at once");
  flags.Int("max-waiting", &f.max_waiting, "requests queued beyond those; more get 429");
  flags.Int("max-body-kb", &f.max_body_kb, "largest request body in KiB; larger get 413");
  AddDraftFlags(flags, &f.draft);
  AddPrefixCacheFlag(flags, &f.no_prefix_cache);
  flags.String("model-name", &f.model_name, "model name in answers and /v1/models",
               "the --model path");
  return RunCommand(flags, argc, argv, [&] { return Serve(f); });
}

}  // namespace ladder
