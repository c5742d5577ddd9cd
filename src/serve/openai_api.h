// The OpenAI-compatible request and response bodies of `ladder serve`
// (docs/serving.md): parsing and validating POST /v1/completions and
// POST /v1/chat/completions, and writing completion objects, streamed
// chunks (server-sent events) and error objects with OpenAI's field names.
//
// Parsing never throws: malformed JSON, wrong types and values out of range
// become InvalidArgument statuses whose message names the field; the field
// also rides along as the status payload kParamPayload (ErrorFromStatus puts
// it in the error's "param").
//
// Chat template: each message becomes "<|ROLE|>\n" CONTENT "\n" (roles
// system, user, assistant), and the prompt ends with "<|assistant|>\n", so
// the model writes the assistant's turn. The turn ends at any of
// kChatStops ("\n<|user|>", "\n<|system|>", "\n<|assistant|>"), which are
// added to the request's own stop strings, so the model never writes the
// next turn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/serve/sampler.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

inline constexpr absl::string_view kParamPayload = "ladder.dev/param";
inline constexpr int kMaxStops = 4;
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

// What the model knows that validation needs.
struct ModelLimits {
  int context = 0;     // prompt + max_tokens must fit
  int vocab_size = 0;  // token ids in a prompt array must be below
};

// A validated request, for either endpoint.
struct CompletionRequest {
  bool chat = false;
  std::vector<int32_t> prompt;  // token ids, at least one
  int max_tokens = 16;          // completions: 16; chat: the rest of the context
  SamplingParams sampling;      // temperature 1, top_p 1, top_k 0 unless given
  bool has_seed = false;
  uint64_t seed = 0;
  std::vector<std::string> stop;  // the request's, then (chat) ChatStops()
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// POST /v1/completions: prompt (string or array of token ids), max_tokens,
// temperature, top_p, top_k (extension), seed, stop (string or up to 4),
// stream, stream_options, n (1 only), model (any string; the server answers
// with its own name). Other fields are ignored.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const Tokenizer& tokenizer,
                                                         const ModelLimits& limits);
// POST /v1/chat/completions: messages [{role, content}] instead of prompt,
// max_tokens (or max_completion_tokens); the rest as above.
absl::StatusOr<CompletionRequest> ParseChatRequest(absl::string_view body,
                                                   const Tokenizer& tokenizer,
                                                   const ModelLimits& limits);

// An error answer: the HTTP status and OpenAI's {"error": {...}} object.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field; "" writes null
  std::string code;   // "" writes null
};
// InvalidArgument 400, Unauthenticated 401, NotFound 404, ResourceExhausted
// 429, Unavailable 503, anything else 500; param from kParamPayload.
ApiError ErrorFromStatus(const absl::Status& status);
std::string ErrorJson(const ApiError& error);

// What every response object of one request shares.
struct ResponseMeta {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool chat = false;
};
struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// The whole answer of a non-streaming request.
std::string CompletionJson(const ResponseMeta& meta, const std::string& text,
                           const std::string& finish_reason, const Usage& usage);
// One streamed chunk: `delta` text (chat: {"content": delta}; with `role`
// true the chat chunk carries {"role": "assistant"} instead), finish_reason
// null unless given.
std::string ChunkJson(const ResponseMeta& meta, const std::string& delta,
                      const std::string& finish_reason, bool role = false);
// The extra last chunk of stream_options.include_usage: no choices, usage.
std::string UsageChunkJson(const ResponseMeta& meta, const Usage& usage);
// GET /v1/models.
std::string ModelsJson(const std::string& model, int64_t created);

// Server-sent events framing: "data: JSON\n\n", and the stream's end.
std::string SseEvent(absl::string_view json);
inline constexpr absl::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace ladder
