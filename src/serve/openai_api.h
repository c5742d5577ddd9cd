// The OpenAI-compatible request and response bodies of `ladder serve`
// (docs/serving.md): parsing and validating POST /v1/completions,
// POST /v1/chat/completions, POST /v1/embeddings, POST /tokenize and
// POST /detokenize, and writing completion objects (with log-probabilities),
// streamed chunks (server-sent events), embeddings and error objects with
// OpenAI's field names.
//
// Nothing is silently ignored: every field of a request body is either
// implemented or refused with InvalidArgument naming it, so a client never
// believes a setting took effect when it did not. Parsing never throws:
// malformed JSON, wrong types, values out of range and unsupported fields
// become InvalidArgument statuses whose message names the field; the field
// also rides along as the status payload kParamPayload (ErrorFromStatus puts
// it in the error's "param"). A `model` naming no served model is NotFound
// (404, code "model_not_found").
//
// Chat template: each message becomes "<|ROLE|>\n" CONTENT "\n" (roles
// system, user, assistant; `developer` is rendered as system, the role it
// replaces), and the prompt ends with "<|assistant|>\n", so the model writes
// the assistant's turn. The turn ends at any of kChatStops ("\n<|user|>",
// "\n<|system|>", "\n<|assistant|>"), which are added to the request's own
// stop strings, so the model never writes the next turn.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/serve/engine.h"
#include "src/serve/sampler.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

inline constexpr absl::string_view kParamPayload = "ladder.dev/param";
inline constexpr int kMaxStops = 4;
inline constexpr int kMaxChoices = 128;  // prompts x best_of of one request, at most
inline constexpr int kMaxCompletionLogprobs = 5;   // OpenAI's limits
inline constexpr int kMaxChatLogprobs = 20;
inline constexpr int kMaxEmbeddingInputs = 2048;
inline const std::vector<std::string>& ChatStops() {
  static const auto* stops =
      new std::vector<std::string>{"\n<|user|>", "\n<|system|>", "\n<|assistant|>"};
  return *stops;
}

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// The prompt text the chat template makes of `messages`.
std::string RenderChat(const std::vector<ChatMessage>& messages);

// What the server knows that validation needs.
struct ModelLimits {
  int context = 0;     // prompt + max_tokens must fit
  int vocab_size = 0;  // token ids in a prompt array must be below
  // The names `model` may take (the first is the default); empty: any.
  std::vector<std::string> names;
};

// OpenAI's response_format.
struct ResponseFormat {
  enum class Type { kText, kJsonObject, kJsonSchema };
  Type type = Type::kText;
  std::string schema;  // kJsonSchema: json_schema.schema, as JSON text in the client's key order
};

// A validated generation request, for either endpoint. It asks for
// best_of candidates per prompt and answers with the n best of them (all of
// them when best_of == n), choice index = prompt index * n + rank.
struct CompletionRequest {
  bool chat = false;
  std::string model;  // the served name it asked for (ModelLimits::names[0] if absent)
  // One or more prompts (completions take an array of prompts), each at
  // least one token.
  std::vector<std::vector<int32_t>> prompts;
  int max_tokens = 16;      // completions: 16; chat: the rest of the context
  SamplingParams sampling;  // temperature 1, top_p 1, top_k 0, no adjustments unless given
  bool has_seed = false;
  uint64_t seed = 0;  // candidate j of a prompt uses seed + j
  std::vector<std::string> stop;  // the request's, then (chat) ChatStops()
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;                   // choices per prompt
  int best_of = 1;             // candidates per prompt, >= n; > n only without stream
  // -1: no log-probabilities. Completions: `logprobs` (0-5); chat: 0-20
  // from `top_logprobs` when `logprobs` is true.
  int logprobs = -1;
  bool echo = false;  // completions: the prompt comes first in the text (and logprobs)
  ResponseFormat response_format;
};

// POST /v1/completions: prompt (a string, an array of token ids, or an
// array of either), max_tokens (0 only with echo), temperature, top_p, top_k
// and repetition_penalty (extensions), presence_penalty, frequency_penalty,
// logit_bias, seed, stop (a string or up to 4), stream, stream_options, n,
// best_of, logprobs, echo, response_format, user, model. `suffix` is
// refused (the models only continue text), as is any other field.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const Tokenizer& tokenizer,
                                                         const ModelLimits& limits);
// POST /v1/chat/completions: messages [{role, content}] (content a string or
// an array of text parts; an assistant's null content is empty) instead of
// prompt, max_tokens or max_completion_tokens, logprobs (a boolean) and
// top_logprobs; the rest as above except best_of, echo and suffix. Tools are
// not supported: `tools` and `functions` are refused, `tool_choice` is
// accepted only as "none", messages with role `tool` or with `tool_calls`
// are refused.
absl::StatusOr<CompletionRequest> ParseChatRequest(absl::string_view body,
                                                   const Tokenizer& tokenizer,
                                                   const ModelLimits& limits);

// POST /v1/embeddings: input (a string, an array of token ids, or an array
// of either; each 1 to context tokens), encoding_format ("float" or
// "base64"), dimensions (only the model's width), user, model.
struct EmbeddingRequest {
  std::string model;
  std::vector<std::vector<int32_t>> inputs;
  bool base64 = false;
};
absl::StatusOr<EmbeddingRequest> ParseEmbeddingRequest(absl::string_view body,
                                                       const Tokenizer& tokenizer,
                                                       const ModelLimits& limits, int width);
// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
// "model", "usage"}; base64 embeddings are the float32 values' little-endian
// bytes.
std::string EmbeddingsJson(const std::string& model, const std::vector<std::vector<float>>& vectors,
                           bool base64, int64_t prompt_tokens);

// POST /tokenize: {"prompt": STRING} or {"messages": [...]} (rendered by the
// chat template), model optional; answers {"tokens", "count",
// "max_model_len"}. POST /detokenize: {"tokens": [ids]}; answers {"prompt"}.
absl::StatusOr<std::vector<int32_t>> ParseTokenizeRequest(absl::string_view body,
                                                          const Tokenizer& tokenizer,
                                                          const ModelLimits& limits);
std::string TokenizeJson(const std::vector<int32_t>& tokens, int context);
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body,
                                                            const ModelLimits& limits);
std::string DetokenizeJson(const std::string& text);

// An error answer: the HTTP status and OpenAI's {"error": {...}} object.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field; "" writes null
  std::string code;   // "" writes null
};
// InvalidArgument 400, Unauthenticated 401, NotFound 404 (code
// model_not_found when the payload names `model`), ResourceExhausted 429,
// Unavailable 503, anything else 500; param from kParamPayload.
ApiError ErrorFromStatus(const absl::Status& status);
std::string ErrorJson(const ApiError& error);

// What every response object of one request shares.
struct ResponseMeta {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool chat = false;
  // stream_options.include_usage: every chunk carries "usage": null, as
  // OpenAI's do, before the last one carries the totals.
  bool include_usage = false;
};
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// One token of a choice's log-probabilities, in the client's terms.
struct LogprobEntry {
  std::string token;             // the token's bytes
  std::optional<float> logprob;  // none for the first token of an echoed prompt
  std::vector<std::pair<std::string, float>> top;  // most likely first
  int64_t text_offset = 0;  // completions: where the token starts in the choice's text
};
// `lp` in the client's terms, the token starting at byte `text_offset`.
LogprobEntry MakeLogprobEntry(const Tokenizer& tokenizer, const TokenLogprob& lp,
                              int64_t text_offset);

// One choice of an answer, or the part of it one streamed chunk carries.
struct ChoiceDelta {
  int index = 0;
  std::string text;
  std::string finish_reason;  // "" writes null
  bool role = false;          // chat stream: the first chunk, {"role": "assistant"}
  bool has_logprobs = false;  // the request asked for them (else "logprobs": null)
  std::vector<LogprobEntry> logprobs;
};

// The whole answer of a non-streaming request.
std::string CompletionJson(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                           const Usage& usage);
// One streamed chunk with one choice's delta.
std::string ChunkJson(const ResponseMeta& meta, const ChoiceDelta& choice);
// The extra last chunk of stream_options.include_usage: no choices, usage.
std::string UsageChunkJson(const ResponseMeta& meta, const Usage& usage);
// GET /v1/models and GET /v1/models/{id}.
std::string ModelsJson(const std::vector<std::string>& names, int64_t created);
std::string ModelJson(const std::string& name, int64_t created);
// NotFound naming `model` (param "model"), as OpenAI answers an unknown model.
absl::Status UnknownModel(const std::string& model);

// Server-sent events framing: "data: JSON\n\n", and the stream's end.
std::string SseEvent(absl::string_view json);
inline constexpr absl::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace ladder
