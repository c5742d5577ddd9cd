#include "src/serve/openai_api.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/core/status.h"

namespace ladder {
namespace {

using json = nlohmann::json;

absl::Status FieldError(absl::string_view param, absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(message);
  if (!param.empty()) s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

std::string Dump(const json& j) {
  // Never throws on bad UTF-8 (replaced by U+FFFD).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char* TypeName(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

absl::Status WrongType(absl::string_view param, absl::string_view want, const json& got) {
  return FieldError(param, absl::StrCat("'", param, "' must be ", want, ", got ", TypeName(got)));
}

absl::StatusOr<json> ParseObject(absl::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return FieldError("", "the request body is not valid JSON");
  if (!j.is_object()) return FieldError("", "the request body must be a JSON object");
  return j;
}

// The field, or nullptr when absent or null (OpenAI treats null as absent).
const json* Field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer field within [lo, hi]; false if absent.
absl::StatusOr<bool> GetInt(const json& body, const char* name, int64_t lo, int64_t hi,
                            int64_t* out) {
  const json* f = Field(body, name);
  if (!f) return false;
  if (!f->is_number_integer()) return WrongType(name, "an integer", *f);
  if (f->is_number_unsigned() &&
      f->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return FieldError(name, absl::StrCat("'", name, "' is out of range"));
  }
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi) {
    return FieldError(name, absl::StrCat("'", name, "' must be in [", lo, ", ", hi, "], got ", v));
  }
  *out = v;
  return true;
}

absl::StatusOr<bool> GetNumber(const json& body, const char* name, double* out) {
  const json* f = Field(body, name);
  if (!f) return false;
  if (!f->is_number()) return WrongType(name, "a number", *f);
  *out = f->get<double>();
  return true;
}

// Fields both endpoints share; `prompt_tokens` is already known.
absl::Status ParseCommon(const json& body, const ModelLimits& limits, bool chat,
                         CompletionRequest* r) {
  const int64_t prompt = static_cast<int64_t>(r->prompt.size());
  if (prompt >= limits.context) {
    return FieldError(
        chat ? "messages" : "prompt",
        absl::StrCat("the prompt has ", prompt, " tokens; the model's context is ", limits.context,
                     " tokens, which must hold the prompt and at "
                     "least one generated token"));
  }
  if (const json* m = Field(body, "model"); m && !m->is_string()) {
    return WrongType("model", "a string", *m);
  }
  int64_t v = 0;
  const char* max_name = "max_tokens";
  ASSIGN_OR_RETURN(bool has_max,
                   GetInt(body, "max_tokens", 1, std::numeric_limits<int>::max(), &v));
  if (!has_max && chat) {
    max_name = "max_completion_tokens";
    ASSIGN_OR_RETURN(has_max, GetInt(body, max_name, 1, std::numeric_limits<int>::max(), &v));
  }
  if (has_max) {
    r->max_tokens = static_cast<int>(v);
  } else {
    r->max_tokens = chat ? static_cast<int>(limits.context - prompt) : 16;
  }
  if (prompt + r->max_tokens > limits.context) {
    return FieldError(max_name,
                      absl::StrCat("'", max_name, "' is too large: the prompt (", prompt,
                                   " tokens) plus ", max_name, " (", r->max_tokens,
                                   ") exceed the model's context of ", limits.context, " tokens"));
  }
  double d = 0;
  ASSIGN_OR_RETURN(bool has, GetNumber(body, "temperature", &d));
  if (has) {
    if (!(d >= 0 && d <= 2)) {
      return FieldError("temperature", absl::StrCat("'temperature' must be in [0, 2], got ", d));
    }
    r->sampling.temperature = d;
  }
  ASSIGN_OR_RETURN(has, GetNumber(body, "top_p", &d));
  if (has) {
    if (!(d > 0 && d <= 1)) {
      return FieldError("top_p", absl::StrCat("'top_p' must be in (0, 1], got ", d));
    }
    r->sampling.top_p = d;
  }
  ASSIGN_OR_RETURN(has, GetInt(body, "top_k", -1, std::numeric_limits<int>::max(), &v));
  if (has) r->sampling.top_k = v < 0 ? 0 : static_cast<int>(v);  // -1: off, as in vLLM
  ASSIGN_OR_RETURN(r->has_seed, GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max(), &v));
  if (r->has_seed) r->seed = static_cast<uint64_t>(v);
  ASSIGN_OR_RETURN(has, GetInt(body, "n", std::numeric_limits<int64_t>::min(),
                               std::numeric_limits<int64_t>::max(), &v));
  if (has && v != 1) {
    return FieldError("n", absl::StrCat("'n' must be 1 (one choice per request), got ", v));
  }
  if (const json* s = Field(body, "stop")) {
    if (s->is_string()) {
      r->stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > static_cast<size_t>(kMaxStops)) {
        return FieldError(
            "stop", absl::StrCat("'stop' takes at most ", kMaxStops, " strings, got ", s->size()));
      }
      for (const json& e : *s) {
        if (!e.is_string()) return WrongType("stop", "a string or an array of strings", e);
        r->stop.push_back(e.get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or an array of strings", *s);
    }
    for (const std::string& stop : r->stop) {
      if (stop.empty()) return FieldError("stop", "'stop' strings must not be empty");
    }
  }
  if (const json* s = Field(body, "stream")) {
    if (!s->is_boolean()) return WrongType("stream", "a boolean", *s);
    r->stream = s->get<bool>();
  }
  if (const json* o = Field(body, "stream_options")) {
    if (!o->is_object()) return WrongType("stream_options", "an object", *o);
    if (const json* u = Field(*o, "include_usage")) {
      if (!u->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *u);
      r->include_usage = u->get<bool>();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CompletionRequest> ParseCompletionImpl(absl::string_view body,
                                                      const Tokenizer& tokenizer,
                                                      const ModelLimits& limits) {
  ASSIGN_OR_RETURN(json j, ParseObject(body));
  CompletionRequest r;
  const json* p = Field(j, "prompt");
  if (!p) return FieldError("prompt", "'prompt' is required");
  if (p->is_string()) {
    r.prompt = tokenizer.Encode(p->get<std::string>());
  } else if (p->is_array()) {
    for (size_t i = 0; i < p->size(); ++i) {
      const json& t = (*p)[i];
      if (!t.is_number_integer()) {
        return FieldError(
            "prompt",
            absl::StrCat("'prompt' must be a string or an array of token ids; "
                         "element ",
                         i, " is ", TypeName(t), " (batches of prompts are not supported)"));
      }
      const bool in_range = t.is_number_unsigned()
                                ? t.get<uint64_t>() < static_cast<uint64_t>(limits.vocab_size)
                                : t.get<int64_t>() >= 0 && t.get<int64_t>() < limits.vocab_size;
      if (!in_range) {
        return FieldError("prompt",
                          absl::StrCat("'prompt' token ", i, " (", Dump(t),
                                       ") is outside the vocabulary [0, ", limits.vocab_size, ")"));
      }
      r.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  } else {
    return WrongType("prompt", "a string or an array of token ids", *p);
  }
  if (r.prompt.empty()) return FieldError("prompt", "'prompt' must not be empty");
  RETURN_IF_ERROR(ParseCommon(j, limits, /*chat=*/false, &r));
  return r;
}

absl::StatusOr<CompletionRequest> ParseChatImpl(absl::string_view body, const Tokenizer& tokenizer,
                                                const ModelLimits& limits) {
  ASSIGN_OR_RETURN(json j, ParseObject(body));
  CompletionRequest r;
  r.chat = true;
  const json* m = Field(j, "messages");
  if (!m) return FieldError("messages", "'messages' is required");
  if (!m->is_array()) return WrongType("messages", "an array of messages", *m);
  if (m->empty()) return FieldError("messages", "'messages' must not be empty");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return WrongType(at, "an object with 'role' and 'content'", msg);
    const json* role = Field(msg, "role");
    const std::string role_at = at + ".role";
    if (!role) return FieldError(role_at, absl::StrCat("'", role_at, "' is required"));
    if (!role->is_string()) return WrongType(role_at, "a string", *role);
    const std::string name = role->get<std::string>();
    if (name != "system" && name != "user" && name != "assistant") {
      return FieldError(
          role_at,
          absl::StrCat("'", role_at, "' must be system, user or assistant, got '", name, "'"));
    }
    const json* content = Field(msg, "content");
    const std::string content_at = at + ".content";
    if (!content) return FieldError(content_at, absl::StrCat("'", content_at, "' is required"));
    if (!content->is_string()) return WrongType(content_at, "a string", *content);
    messages.push_back({name, content->get<std::string>()});
  }
  r.prompt = tokenizer.Encode(RenderChat(messages));
  RETURN_IF_ERROR(ParseCommon(j, limits, /*chat=*/true, &r));
  for (const std::string& s : ChatStops()) r.stop.push_back(s);
  return r;
}

json ErrorObject(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", std::move(err)}};
}

json UsageObject(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json Head(const ResponseMeta& meta, const char* object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

// Parse errors of any kind stay inside this module as statuses.
template <typename F>
absl::StatusOr<CompletionRequest> Guarded(F&& parse) {
  try {
    return parse();
  } catch (const std::exception& e) {
    return FieldError("", absl::StrCat("malformed request: ", e.what()));
  }
}

}  // namespace

std::string RenderChat(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages)
    absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, "\n");
  absl::StrAppend(&out, "<|assistant|>\n");
  return out;
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const Tokenizer& tokenizer,
                                                         const ModelLimits& limits) {
  return Guarded([&] { return ParseCompletionImpl(body, tokenizer, limits); });
}

absl::StatusOr<CompletionRequest> ParseChatRequest(absl::string_view body,
                                                   const Tokenizer& tokenizer,
                                                   const ModelLimits& limits) {
  return Guarded([&] { return ParseChatImpl(body, tokenizer, limits); });
}

ApiError ErrorFromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  if (auto param = status.GetPayload(kParamPayload)) e.param = std::string(*param);
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.http_status = 401;
      e.code = "invalid_api_key";
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

std::string ErrorJson(const ApiError& error) { return Dump(ErrorObject(error)); }

std::string CompletionJson(const ResponseMeta& meta, const std::string& text,
                           const std::string& finish_reason, const Usage& usage) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason}};
  if (meta.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  json j = Head(meta, meta.chat ? "chat.completion" : "text_completion");
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = UsageObject(usage);
  return Dump(j);
}

std::string ChunkJson(const ResponseMeta& meta, const std::string& delta,
                      const std::string& finish_reason, bool role) {
  json choice = {{"index", 0}};
  if (meta.chat) {
    json d = json::object();
    if (role) {
      d["role"] = "assistant";
    } else if (!delta.empty()) {
      d["content"] = delta;
    }
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = delta;
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  json j = Head(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array({std::move(choice)});
  return Dump(j);
}

std::string UsageChunkJson(const ResponseMeta& meta, const Usage& usage) {
  json j = Head(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = UsageObject(usage);
  return Dump(j);
}

std::string ModelsJson(const std::string& model, int64_t created) {
  json m = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "ladder"}};
  return Dump(json{{"object", "list"}, {"data", json::array({std::move(m)})}});
}

std::string SseEvent(absl::string_view json_text) {
  return absl::StrCat("data: ", json_text, "\n\n");
}

}  // namespace ladder
