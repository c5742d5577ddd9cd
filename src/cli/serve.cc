// ladder serve: an OpenAI-compatible HTTP server (docs/serving.md) over the
// continuous-batching engine (src/serve/engine_loop.h, http_server.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/backend/backend_factory.h"
#include "src/cli/commands.h"
#include "src/cli/device_flag.h"
#include "src/cli/inference_flags.h"
#include "src/cli/model_dir.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/serve/engine_loop.h"
#include "src/serve/http_server.h"
#include "src/serve/prefill_server.h"
#include "src/serve/remote_prefill.h"

namespace ladder {
namespace {

constexpr int64_t kDefaultKvCapBytes = int64_t{1} << 30;

struct ServeFlags {
  std::string model, host = "127.0.0.1", api_key, model_name, device = "auto";
  std::string role = "both", prefill_addr;
  FormatFlags formats;
  bool cuda_graph = false;
  DraftFlags draft;
  bool no_prefix_cache = false;
  int64_t port = 8080, kv_tokens = 0, max_batch_tokens = 256, max_running = 64, max_waiting = 256,
          max_body_kb = 1024, keep_alive_s = 5, request_timeout_s = 10, transfer_port = 0;
};

// The base name of the --model path ("runs/kjv/" serves as "kjv").
std::string DefaultModelName(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() ? std::string("ladder") : name;
}

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
  RETURN_IF_ERROR(positive("keep-alive-s", f.keep_alive_s, 3600));
  RETURN_IF_ERROR(positive("request-timeout-s", f.request_timeout_s, 3600));
  if (f.role != "both" && f.role != "prefill" && f.role != "decode") {
    return absl::InvalidArgumentError(
        absl::StrCat("--role must be both, prefill or decode, got '", f.role, "'"));
  }
  if (f.role == "decode" && f.prefill_addr.empty()) {
    return absl::InvalidArgumentError("--role decode needs --prefill-addr HOST:PORT");
  }
  if (f.role != "decode" && !f.prefill_addr.empty()) {
    return absl::InvalidArgumentError("--prefill-addr is only for --role decode");
  }
  if (f.transfer_port < 0 || f.transfer_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transfer-port must be in [0, 65535], got ", f.transfer_port));
  }
  if (f.role != "prefill" && f.transfer_port != 0) {
    return absl::InvalidArgumentError("--transfer-port is only for --role prefill");
  }
  if (f.role == "prefill" && !f.draft.model.empty()) {
    return absl::InvalidArgumentError(
        "--draft is only for the decode and both roles (the prefill role does not generate)");
  }
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

  std::unique_ptr<RemotePrefill> remote;
  if (f.role == "decode") {
    transfer::PeerModel peer;
    peer.config = cfg;
    peer.weights = weights;
    peer.kv = lo.engine.kv_format;
    ASSIGN_OR_RETURN(remote, RemotePrefill::Create(f.prefill_addr, peer));
  }

  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(f.device));
  ASSIGN_OR_RETURN(auto model, CreateInferenceModel(dir.model, backend.get(), weights));
  if (f.role == "prefill") {
    if (f.cuda_graph) {
      return absl::InvalidArgumentError("--cuda-graph: the prefill role runs no decode steps");
    }
    PrefillServer::Options po;
    po.host = f.host;
    po.port = static_cast<int>(f.transfer_port);
    po.kv_format = lo.engine.kv_format;
    po.max_batch_tokens = lo.engine.max_batch_tokens;
    ASSIGN_OR_RETURN(auto prefill, PrefillServer::Create(model.get(), po));
    std::fprintf(stderr,
                 "ladder serve: prefill role, model %s (%lld parameters, weights %s %s), KV %s, "
                 "transfer port on %s:%d\n",
                 f.model.c_str(), static_cast<long long>(cfg.NumParameters()),
                 WeightFormatName(weights), MiB(model->weight_bytes()).c_str(),
                 KvFormatName(po.kv_format), po.host.c_str(), prefill->port());
    std::fflush(stderr);
    RETURN_IF_ERROR(
        ServeUntilSignal([&] { return prefill->Serve(); }, [&] { prefill->Shutdown(); }));
    std::fprintf(stderr, "ladder serve: stopped\n");
    return absl::OkStatus();
  }
  if (f.role == "decode") {
    // A mismatched prefill server is a configuration error; one that is not
    // up yet is fine (requests get 503 until it is).
    if (absl::Status s = remote->Check(); !s.ok()) {
      if (s.code() != absl::StatusCode::kUnavailable) return s;
      std::fprintf(stderr, "ladder serve: %s; prompts get 503 until it is reachable\n",
                   std::string(s.message()).c_str());
    }
    lo.remote_prefill = remote.get();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Gpt> draft,
                   LoadDraftModel(f.draft, backend.get(), weights, &lo.engine));
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, model.get()));
  RETURN_IF_ERROR(ApplyActivationsFlag(f.formats, draft.get()));
  RETURN_IF_ERROR(ApplyCudaGraphFlag(f.cuda_graph, model.get()));
  RETURN_IF_ERROR(ApplyCudaGraphFlag(f.cuda_graph, draft.get()));
  ASSIGN_OR_RETURN(auto loop, EngineLoop::Create(model.get(), lo));

  ServerOptions so;
  so.host = f.host;
  so.port = static_cast<int>(f.port);
  so.api_key = f.api_key;
  so.max_body_bytes = static_cast<size_t>(f.max_body_kb) * 1024;
  // Every request in the engine, running or waiting, holds a thread until
  // its answer is written; the extra ones keep /health, /metrics, refusals
  // and requests still being read answered when the engine is full.
  so.threads = static_cast<int>(std::min<int64_t>(f.max_running + f.max_waiting, 4096) + 32);
  so.keep_alive_timeout = std::chrono::seconds(f.keep_alive_s);
  so.request_timeout = std::chrono::seconds(f.request_timeout_s);
  so.model_names = absl::StrSplit(f.model_name.empty() ? DefaultModelName(f.model) : f.model_name,
                                  ',');
  for (const std::string& name : so.model_names) {
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model-name must be names separated by commas, got '", f.model_name, "'"));
    }
  }
  ASSIGN_OR_RETURN(auto server, HttpServer::Create(so, loop.get(), &dir.tokenizer, cfg));

  const int64_t tokens = int64_t{lo.engine.kv_blocks} * kBlockTokens;
  std::fprintf(stderr,
               "ladder serve: model %s (%lld parameters, weights %s %s), KV %s %lld tokens (%s), "
               "prefix cache %s, listening on http://%s:%d\n",
               absl::StrJoin(so.model_names, ",").c_str(), static_cast<long long>(cfg.NumParameters()),
               WeightFormatName(weights), MiB(model->weight_bytes()).c_str(),
               KvFormatName(lo.engine.kv_format), static_cast<long long>(tokens),
               MiB(tokens * per_token).c_str(), lo.engine.prefix_cache ? "on" : "off",
               so.host.c_str(), server->port());
  if (remote) {
    std::fprintf(stderr, "ladder serve: decode role, prompts prefilled by %s\n",
                 remote->address().c_str());
  }
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
  flags.String("api-key", &f.api_key,
               "require 'Authorization: Bearer KEY' on every route but /health and /metrics",
               "none");
  AddFormatFlags(flags, &f.formats);
  AddDeviceFlag(flags, &f.device);
  flags.Int("kv-tokens", &f.kv_tokens, "KV cache capacity in tokens",
            "max-running full contexts, at most 1 GiB");
  flags.Int("max-batch-tokens", &f.max_batch_tokens, "tokens per engine step");
  flags.Int("max-running", &f.max_running, "requests decoding at once");
  flags.Int("max-waiting", &f.max_waiting, "requests queued beyond those; more get 429");
  flags.Int("max-body-kb", &f.max_body_kb, "largest request body in KiB; larger get 413");
  flags.Int("keep-alive-s", &f.keep_alive_s, "seconds an idle connection stays open");
  flags.Int("request-timeout-s", &f.request_timeout_s,
            "seconds to receive a request's head and body; later ones get 408");
  AddDraftFlags(flags, &f.draft);
  flags.String("role", &f.role,
               "both (one server), prefill (runs prompts for decode servers) or decode (the "
               "HTTP front; prompts run on --prefill-addr)");
  flags.String("prefill-addr", &f.prefill_addr, "--role decode: the prefill server's HOST:PORT",
               "none");
  flags.Int("transfer-port", &f.transfer_port,
            "--role prefill: the KV transfer port; 0 = any free port (printed at startup)");
  AddPrefixCacheFlag(flags, &f.no_prefix_cache);
  AddCudaGraphFlag(flags, &f.cuda_graph);
  flags.String("model-name", &f.model_name,
               "names a request's 'model' may take, comma separated (the first is the default)",
               "the --model path's base name");
  return RunCommand(flags, argc, argv, [&] { return Serve(f); });
}

}  // namespace ladder
