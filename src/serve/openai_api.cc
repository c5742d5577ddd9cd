#include "src/serve/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
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

// Deeper nesting than any request needs. nlohmann parses iteratively, but
// dump() (error messages, a schema's copy) recurses once per level, so a
// small body of 100000 '[' would overflow the handler's stack.
constexpr int kMaxDepth = 128;

absl::StatusOr<json> ParseObject(absl::string_view body) {
  bool too_deep = false;
  // A value deeper than kMaxDepth is discarded as it starts, so the parser
  // never builds the deep tree either.
  const auto depth_guard = [&too_deep](int depth, json::parse_event_t event, json&) {
    if (depth > kMaxDepth &&
        (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start)) {
      too_deep = true;
      return false;
    }
    return true;
  };
  json j = json::parse(body.begin(), body.end(), depth_guard, /*allow_exceptions=*/false);
  if (too_deep) {
    return FieldError("",
                      absl::StrCat("the request body nests deeper than ", kMaxDepth, " levels"));
  }
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

// Refuses every field of `body` outside `known`, naming it; `refused`
// gives some of them a reason. A null field counts as absent (OpenAI's
// reading), so clients that send every field as null pass.
absl::Status CheckFields(const json& body, const std::set<std::string>& known,
                         const std::map<std::string, std::string>& refused,
                         absl::string_view where = "") {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it->is_null()) continue;
    const std::string name = absl::StrCat(std::string(where), it.key());
    if (auto r = refused.find(it.key()); r != refused.end()) {
      return FieldError(name, absl::StrCat("'", name, "' is not supported: ", r->second));
    }
    if (!known.contains(it.key())) {
      return FieldError(name, absl::StrCat("'", name, "' is not supported by ladder"));
    }
  }
  return absl::OkStatus();
}

// `model`, checked against the served names (ModelLimits::names).
absl::StatusOr<std::string> GetModel(const json& body, const ModelLimits& limits) {
  const json* m = Field(body, "model");
  if (!m) return limits.names.empty() ? std::string() : limits.names[0];
  if (!m->is_string()) return WrongType("model", "a string", *m);
  const std::string name = m->get<std::string>();
  if (!limits.names.empty() &&
      std::find(limits.names.begin(), limits.names.end(), name) == limits.names.end()) {
    return UnknownModel(name);
  }
  return name;
}

// A token id in [0, vocab); `what` names it in the error.
absl::StatusOr<int32_t> GetTokenId(const json& t, const std::string& param, const std::string& what,
                                   int vocab) {
  if (!t.is_number_integer()) {
    return FieldError(param, absl::StrCat(what, " must be a token id, got ", TypeName(t)));
  }
  const bool in_range = t.is_number_unsigned()
                            ? t.get<uint64_t>() < static_cast<uint64_t>(vocab)
                            : t.get<int64_t>() >= 0 && t.get<int64_t>() < vocab;
  if (!in_range) {
    return FieldError(param, absl::StrCat(what, " (", Dump(t), ") is outside the vocabulary [0, ",
                                          vocab, ")"));
  }
  return static_cast<int32_t>(t.get<int64_t>());
}

// A string, an array of token ids, or an array of either: one or more
// token sequences, none empty (`prompt` and `input`).
absl::StatusOr<std::vector<std::vector<int32_t>>> GetTexts(const json& f, const char* name,
                                                           const Tokenizer& tokenizer,
                                                           int vocab) {
  const std::string want = "a string, an array of token ids, or an array of either";
  std::vector<std::vector<int32_t>> out;
  auto one = [&](const json& e, const std::string& at) -> absl::Status {
    std::vector<int32_t> ids;
    if (e.is_string()) {
      ids = tokenizer.Encode(e.get<std::string>());
    } else if (e.is_array()) {
      for (size_t i = 0; i < e.size(); ++i) {
        ASSIGN_OR_RETURN(int32_t id,
                         GetTokenId(e[i], name, absl::StrCat("'", at, "' element ", i), vocab));
        ids.push_back(id);
      }
    } else {
      return WrongType(name, want, e);
    }
    if (ids.empty()) return FieldError(name, absl::StrCat("'", at, "' must not be empty"));
    out.push_back(std::move(ids));
    return absl::OkStatus();
  };
  if (f.is_array() && !f.empty() && (f[0].is_string() || f[0].is_array())) {
    for (size_t i = 0; i < f.size(); ++i) {
      if (!f[i].is_string() && !f[i].is_array()) {
        return FieldError(name, absl::StrCat("'", name, "' mixes texts and token ids; element ", i,
                                             " is ", TypeName(f[i])));
      }
      RETURN_IF_ERROR(one(f[i], absl::StrCat(name, "[", i, "]")));
    }
    return out;
  }
  RETURN_IF_ERROR(one(f, name));
  return out;
}

// A number within [lo, hi] (open at lo when lo_open); false if absent.
absl::StatusOr<bool> GetRange(const json& body, const char* name, double lo, double hi,
                              bool lo_open, double* out) {
  double d = 0;
  ASSIGN_OR_RETURN(bool has, GetNumber(body, name, &d));
  if (!has) return false;
  if (!((lo_open ? d > lo : d >= lo) && d <= hi)) {
    return FieldError(name, absl::StrCat("'", name, "' must be in ", lo_open ? "(" : "[", lo, ", ",
                                         hi, "], got ", d));
  }
  *out = d;
  return true;
}

absl::StatusOr<bool> GetBool(const json& body, const char* name, bool* out) {
  const json* f = Field(body, name);
  if (!f) return false;
  if (!f->is_boolean()) return WrongType(name, "a boolean", *f);
  *out = f->get<bool>();
  return true;
}

absl::StatusOr<ResponseFormat> GetResponseFormat(const json& body) {
  ResponseFormat out;
  const json* f = Field(body, "response_format");
  if (!f) return out;
  if (!f->is_object()) return WrongType("response_format", "an object", *f);
  RETURN_IF_ERROR(CheckFields(*f, {"type", "json_schema"}, {}, "response_format."));
  const json* type = Field(*f, "type");
  if (!type) return FieldError("response_format", "'response_format.type' is required");
  if (!type->is_string()) return WrongType("response_format", "an object with a string 'type'", *type);
  const std::string t = type->get<std::string>();
  if (t == "text") return out;
  if (t == "json_object") {
    out.type = ResponseFormat::Type::kJsonObject;
    return out;
  }
  if (t != "json_schema") {
    return FieldError("response_format",
                      absl::StrCat("'response_format.type' must be text, json_object or "
                                   "json_schema, got '", t, "'"));
  }
  const json* js = Field(*f, "json_schema");
  if (!js || !js->is_object()) {
    return FieldError("response_format",
                      "'response_format.json_schema' must be an object with a 'schema'");
  }
  RETURN_IF_ERROR(CheckFields(*js, {"name", "description", "schema", "strict"}, {},
                              "response_format.json_schema."));
  const json* schema = Field(*js, "schema");
  if (!schema || !schema->is_object()) {
    return FieldError("response_format",
                      "'response_format.json_schema.schema' must be a JSON schema object");
  }
  out.type = ResponseFormat::Type::kJsonSchema;
  out.schema = Dump(*schema);
  return out;
}

// A JSON schema's properties come out in the order the client wrote them,
// which nlohmann::json (a sorted map) forgets: the schema is taken again
// from the body, in order. (The body parsed once already.)
void KeepSchemaOrder(absl::string_view body, CompletionRequest* r) {
  if (r->response_format.type != ResponseFormat::Type::kJsonSchema) return;
  const auto ordered = nlohmann::ordered_json::parse(body.begin(), body.end());
  r->response_format.schema = ordered["response_format"]["json_schema"]["schema"].dump();
}

// Fields both endpoints share; the prompts are already known.
absl::Status ParseCommon(const json& body, const ModelLimits& limits, bool chat,
                         CompletionRequest* r) {
  const char* prompt_name = chat ? "messages" : "prompt";
  ASSIGN_OR_RETURN(r->model, GetModel(body, limits));
  ASSIGN_OR_RETURN(bool has, GetBool(body, "echo", &r->echo));
  int64_t v = 0;
  const char* max_name = "max_tokens";
  ASSIGN_OR_RETURN(bool has_max, GetInt(body, "max_tokens", r->echo ? 0 : 1,
                                        std::numeric_limits<int>::max(), &v));
  if (chat && Field(body, "max_completion_tokens")) {
    if (has_max) {
      return FieldError("max_completion_tokens",
                        "give 'max_tokens' or 'max_completion_tokens', not both");
    }
    max_name = "max_completion_tokens";
    ASSIGN_OR_RETURN(has_max, GetInt(body, max_name, 1, std::numeric_limits<int>::max(), &v));
  }
  size_t longest = 0;
  for (const auto& p : r->prompts) longest = std::max(longest, p.size());
  const int64_t prompt = static_cast<int64_t>(longest);
  const bool score_only = has_max && v == 0;
  if (prompt > limits.context || (prompt == limits.context && !score_only)) {
    return FieldError(
        prompt_name,
        absl::StrCat("the prompt has ", prompt, " tokens; the model's context is ", limits.context,
                     " tokens, which must hold the prompt and at least one generated token"));
  }
  r->max_tokens = has_max ? static_cast<int>(v) : chat ? static_cast<int>(limits.context - prompt)
                                                       : 16;
  if (prompt + r->max_tokens > limits.context) {
    return FieldError(max_name,
                      absl::StrCat("'", max_name, "' is too large: the prompt (", prompt,
                                   " tokens) plus ", max_name, " (", r->max_tokens,
                                   ") exceed the model's context of ", limits.context, " tokens"));
  }
  double d = 0;
  ASSIGN_OR_RETURN(has, GetRange(body, "temperature", 0, 2, false, &d));
  if (has) r->sampling.temperature = d;
  ASSIGN_OR_RETURN(has, GetRange(body, "top_p", 0, 1, true, &d));
  if (has) r->sampling.top_p = d;
  ASSIGN_OR_RETURN(has, GetInt(body, "top_k", -1, std::numeric_limits<int>::max(), &v));
  if (has) r->sampling.top_k = v < 0 ? 0 : static_cast<int>(v);  // -1: off, as in vLLM
  ASSIGN_OR_RETURN(has, GetRange(body, "presence_penalty", -2, 2, false, &d));
  if (has) r->sampling.presence_penalty = d;
  ASSIGN_OR_RETURN(has, GetRange(body, "frequency_penalty", -2, 2, false, &d));
  if (has) r->sampling.frequency_penalty = d;
  ASSIGN_OR_RETURN(has, GetRange(body, "repetition_penalty", 0, 2, true, &d));
  if (has) r->sampling.repetition_penalty = d;
  if (const json* b = Field(body, "logit_bias")) {
    if (!b->is_object()) return WrongType("logit_bias", "an object of token id: bias", *b);
    for (auto it = b->begin(); it != b->end(); ++it) {
      int64_t id = -1;
      if (!absl::SimpleAtoi(it.key(), &id) || id < 0 || id >= limits.vocab_size) {
        return FieldError("logit_bias",
                          absl::StrCat("'logit_bias' key '", it.key(),
                                       "' is not a token id in [0, ", limits.vocab_size, ")"));
      }
      if (!it->is_number() || !(it->get<double>() >= -100 && it->get<double>() <= 100)) {
        return FieldError("logit_bias", absl::StrCat("'logit_bias' values must be numbers in "
                                                     "[-100, 100]; token ", it.key(), " has ",
                                                     Dump(*it)));
      }
      r->sampling.logit_bias.emplace_back(static_cast<int32_t>(id), it->get<double>());
    }
  }
  ASSIGN_OR_RETURN(r->has_seed, GetInt(body, "seed", std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max(), &v));
  if (r->has_seed) r->seed = static_cast<uint64_t>(v);
  ASSIGN_OR_RETURN(has, GetInt(body, "n", 1, kMaxChoices, &v));
  if (has) r->n = static_cast<int>(v);
  r->best_of = r->n;
  ASSIGN_OR_RETURN(has, GetInt(body, "best_of", 1, kMaxChoices, &v));
  if (has) {
    if (v < r->n) {
      return FieldError("best_of", absl::StrCat("'best_of' (", v, ") must be at least 'n' (",
                                                r->n, ")"));
    }
    r->best_of = static_cast<int>(v);
  }
  if (r->best_of * r->prompts.size() > static_cast<size_t>(kMaxChoices)) {
    return FieldError(r->best_of > 1 ? "best_of" : "prompt",
                      absl::StrCat("one request may ask for at most ", kMaxChoices,
                                   " sequences (prompts times best_of), got ",
                                   r->best_of * r->prompts.size()));
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
  ASSIGN_OR_RETURN(has, GetBool(body, "stream", &r->stream));
  if (const json* o = Field(body, "stream_options")) {
    if (!o->is_object()) return WrongType("stream_options", "an object", *o);
    RETURN_IF_ERROR(CheckFields(*o, {"include_usage"}, {}, "stream_options."));
    if (const json* u = Field(*o, "include_usage")) {
      if (!u->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *u);
      r->include_usage = u->get<bool>();
    }
    if (!r->stream) {
      return FieldError("stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
  }
  if (r->stream && r->best_of > r->n) {
    return FieldError("best_of", "'best_of' must equal 'n' when streaming (the best candidates "
                                 "are known only at the end)");
  }
  if (const json* u = Field(body, "user"); u && !u->is_string()) {
    return WrongType("user", "a string", *u);
  }
  ASSIGN_OR_RETURN(r->response_format, GetResponseFormat(body));
  return absl::OkStatus();
}

absl::StatusOr<CompletionRequest> ParseCompletionImpl(absl::string_view body,
                                                      const Tokenizer& tokenizer,
                                                      const ModelLimits& limits) {
  ASSIGN_OR_RETURN(json j, ParseObject(body));
  RETURN_IF_ERROR(CheckFields(
      j,
      {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "n", "best_of", "stream",
       "stream_options", "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty",
       "repetition_penalty", "logit_bias", "seed", "user", "response_format"},
      {{"suffix", "the models only continue text, they do not fill in a gap"}}));
  CompletionRequest r;
  const json* p = Field(j, "prompt");
  if (!p) return FieldError("prompt", "'prompt' is required");
  ASSIGN_OR_RETURN(r.prompts, GetTexts(*p, "prompt", tokenizer, limits.vocab_size));
  int64_t v = 0;
  ASSIGN_OR_RETURN(bool has, GetInt(j, "logprobs", 0, kMaxCompletionLogprobs, &v));
  if (has) r.logprobs = static_cast<int>(v);
  RETURN_IF_ERROR(ParseCommon(j, limits, /*chat=*/false, &r));
  KeepSchemaOrder(body, &r);
  return r;
}

// The content of message `at`: a string, or an array of text parts.
absl::StatusOr<std::string> GetContent(const json& msg, const std::string& at, bool assistant) {
  const std::string content_at = at + ".content";
  auto it = msg.find("content");
  if (it == msg.end() || (it->is_null() && !assistant)) {
    return FieldError(content_at, absl::StrCat("'", content_at, "' is required"));
  }
  if (it->is_null()) return std::string();  // an assistant turn with no text
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) return WrongType(content_at, "a string or an array of text parts", *it);
  std::string text;
  for (size_t k = 0; k < it->size(); ++k) {
    const json& part = (*it)[k];
    const std::string part_at = absl::StrCat(content_at, "[", k, "]");
    if (!part.is_object()) return WrongType(part_at, "a content part object", part);
    const json* type = Field(part, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "text") {
      return FieldError(part_at + ".type",
                        absl::StrCat("'", part_at, ".type' ",
                                     type ? absl::StrCat(Dump(*type), " is not supported")
                                          : std::string("is required"),
                                     ": ladder's models read text parts only"));
    }
    RETURN_IF_ERROR(CheckFields(part, {"type", "text"}, {}, part_at + "."));
    const json* t = Field(part, "text");
    if (!t || !t->is_string()) {
      return FieldError(part_at + ".text", absl::StrCat("'", part_at, ".text' must be a string"));
    }
    text += t->get<std::string>();
  }
  return text;
}

absl::StatusOr<std::vector<ChatMessage>> GetMessages(const json& j) {
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
    std::string name = role->get<std::string>();
    if (name == "tool" || name == "function") {
      return FieldError(role_at, absl::StrCat("'", role_at, "' '", name,
                                              "' is not supported: ladder does not call tools"));
    }
    if (name != "system" && name != "developer" && name != "user" && name != "assistant") {
      return FieldError(role_at, absl::StrCat("'", role_at,
                                              "' must be system, developer, user or assistant, "
                                              "got '", name, "'"));
    }
    RETURN_IF_ERROR(CheckFields(msg, {"role", "content"},
                                {{"tool_calls", "ladder does not call tools"},
                                 {"function_call", "ladder does not call tools"},
                                 {"name", "the chat template has no participant names"}},
                                at + "."));
    ASSIGN_OR_RETURN(std::string content, GetContent(msg, at, name == "assistant"));
    if (name == "developer") name = "system";
    messages.push_back({name, std::move(content)});
  }
  return messages;
}

absl::StatusOr<CompletionRequest> ParseChatImpl(absl::string_view body, const Tokenizer& tokenizer,
                                                const ModelLimits& limits) {
  ASSIGN_OR_RETURN(json j, ParseObject(body));
  const std::string no_tools = "ladder does not call tools";
  RETURN_IF_ERROR(CheckFields(
      j,
      {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
       "top_k", "n", "stream", "stream_options", "logprobs", "top_logprobs", "stop",
       "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "seed", "user",
       "response_format", "tool_choice"},
      {{"tools", no_tools},
       {"functions", no_tools},
       {"function_call", no_tools},
       {"parallel_tool_calls", no_tools}}));
  if (const json* t = Field(j, "tool_choice"); t && !(t->is_string() && *t == "none")) {
    return FieldError("tool_choice",
                      "'tool_choice' is not supported: ladder does not call tools (only \"none\")");
  }
  CompletionRequest r;
  r.chat = true;
  ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, GetMessages(j));
  r.prompts.push_back(tokenizer.Encode(RenderChat(messages)));
  bool logprobs = false;
  ASSIGN_OR_RETURN(bool has, GetBool(j, "logprobs", &logprobs));
  int64_t v = 0;
  ASSIGN_OR_RETURN(has, GetInt(j, "top_logprobs", 0, kMaxChatLogprobs, &v));
  if (has && !logprobs) {
    return FieldError("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  if (logprobs) r.logprobs = has ? static_cast<int>(v) : 0;
  RETURN_IF_ERROR(ParseCommon(j, limits, /*chat=*/true, &r));
  KeepSchemaOrder(body, &r);
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
auto Guarded(F&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::exception& e) {
    return FieldError("", absl::StrCat("malformed request: ", e.what()));
  }
}

json TopObject(const LogprobEntry& e) {
  json top = json::object();
  for (const auto& [token, lp] : e.top) top[token] = lp;
  return top;
}

std::vector<int> Bytes(const std::string& s) {
  return std::vector<int>(reinterpret_cast<const unsigned char*>(s.data()),
                          reinterpret_cast<const unsigned char*>(s.data()) + s.size());
}

// The choice's "logprobs": the legacy completions shape (parallel arrays)
// or the chat shape (one object per token).
json LogprobsObject(const ChoiceDelta& c, bool chat) {
  if (!c.has_logprobs) return nullptr;
  if (chat) {
    json content = json::array();
    for (const LogprobEntry& e : c.logprobs) {
      json top = json::array();
      for (const auto& [token, lp] : e.top) {
        top.push_back({{"token", token}, {"logprob", lp}, {"bytes", Bytes(token)}});
      }
      content.push_back({{"token", e.token},
                         {"logprob", e.logprob ? json(*e.logprob) : json(nullptr)},
                         {"bytes", Bytes(e.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const LogprobEntry& e : c.logprobs) {
    tokens.push_back(e.token);
    lps.push_back(e.logprob ? json(*e.logprob) : json(nullptr));
    tops.push_back(e.logprob ? TopObject(e) : json(nullptr));
    offsets.push_back(e.text_offset);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json ModelObject(const std::string& name, int64_t created) {
  return {{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "ladder"}};
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

absl::StatusOr<EmbeddingRequest> ParseEmbeddingRequest(absl::string_view body,
                                                       const Tokenizer& tokenizer,
                                                       const ModelLimits& limits, int width) {
  return Guarded([&]() -> absl::StatusOr<EmbeddingRequest> {
    ASSIGN_OR_RETURN(json j, ParseObject(body));
    RETURN_IF_ERROR(CheckFields(j, {"model", "input", "encoding_format", "dimensions", "user"}, {}));
    EmbeddingRequest r;
    ASSIGN_OR_RETURN(r.model, GetModel(j, limits));
    const json* in = Field(j, "input");
    if (!in) return FieldError("input", "'input' is required");
    ASSIGN_OR_RETURN(r.inputs, GetTexts(*in, "input", tokenizer, limits.vocab_size));
    if (r.inputs.size() > static_cast<size_t>(kMaxEmbeddingInputs)) {
      return FieldError("input", absl::StrCat("'input' takes at most ", kMaxEmbeddingInputs,
                                              " texts, got ", r.inputs.size()));
    }
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      if (r.inputs[i].size() > static_cast<size_t>(limits.context)) {
        return FieldError("input", absl::StrCat("'input' ", i, " has ", r.inputs[i].size(),
                                                " tokens; the model's context is ",
                                                limits.context));
      }
    }
    if (const json* f = Field(j, "encoding_format")) {
      if (!f->is_string() || (*f != "float" && *f != "base64")) {
        return FieldError("encoding_format", absl::StrCat("'encoding_format' must be \"float\" "
                                                          "or \"base64\", got ", Dump(*f)));
      }
      r.base64 = *f == "base64";
    }
    int64_t dims = 0;
    ASSIGN_OR_RETURN(bool has, GetInt(j, "dimensions", 1, std::numeric_limits<int>::max(), &dims));
    if (has && dims != width) {
      return FieldError("dimensions", absl::StrCat("'dimensions' must be the model's width, ",
                                                   width, ", got ", dims));
    }
    if (const json* u = Field(j, "user"); u && !u->is_string()) {
      return WrongType("user", "a string", *u);
    }
    return r;
  });
}

std::string EmbeddingsJson(const std::string& model, const std::vector<std::vector<float>>& vectors,
                           bool base64, int64_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      // x86-64 stores floats little-endian, the order the format asks for.
      e["embedding"] = absl::Base64Escape(absl::string_view(
          reinterpret_cast<const char*>(vectors[i].data()), vectors[i].size() * sizeof(float)));
    } else {
      e["embedding"] = vectors[i];
    }
    data.push_back(std::move(e));
  }
  return Dump({{"object", "list"},
               {"data", std::move(data)},
               {"model", model},
               {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

absl::StatusOr<std::vector<int32_t>> ParseTokenizeRequest(absl::string_view body,
                                                          const Tokenizer& tokenizer,
                                                          const ModelLimits& limits) {
  return Guarded([&]() -> absl::StatusOr<std::vector<int32_t>> {
    ASSIGN_OR_RETURN(json j, ParseObject(body));
    RETURN_IF_ERROR(CheckFields(j, {"model", "prompt", "messages"}, {}));
    RETURN_IF_ERROR(GetModel(j, limits).status());
    const json* p = Field(j, "prompt");
    if (p && Field(j, "messages")) {
      return FieldError("messages", "give 'prompt' or 'messages', not both");
    }
    if (p) {
      if (!p->is_string()) return WrongType("prompt", "a string", *p);
      return tokenizer.Encode(p->get<std::string>());
    }
    ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, GetMessages(j));
    return tokenizer.Encode(RenderChat(messages));
  });
}

std::string TokenizeJson(const std::vector<int32_t>& tokens, int context) {
  return Dump({{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", context}});
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body,
                                                            const ModelLimits& limits) {
  return Guarded([&]() -> absl::StatusOr<std::vector<int32_t>> {
    ASSIGN_OR_RETURN(json j, ParseObject(body));
    RETURN_IF_ERROR(CheckFields(j, {"model", "tokens"}, {}));
    RETURN_IF_ERROR(GetModel(j, limits).status());
    const json* t = Field(j, "tokens");
    if (!t) return FieldError("tokens", "'tokens' is required");
    if (!t->is_array()) return WrongType("tokens", "an array of token ids", *t);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < t->size(); ++i) {
      ASSIGN_OR_RETURN(int32_t id, GetTokenId((*t)[i], "tokens",
                                              absl::StrCat("'tokens' element ", i),
                                              limits.vocab_size));
      ids.push_back(id);
    }
    return ids;
  });
}

std::string DetokenizeJson(const std::string& text) { return Dump({{"prompt", text}}); }

absl::Status UnknownModel(const std::string& model) {
  absl::Status s = absl::NotFoundError(
      absl::StrCat("The model '", model, "' does not exist (GET /v1/models lists the served ones)"));
  s.SetPayload(kParamPayload, absl::Cord("model"));
  return s;
}

LogprobEntry MakeLogprobEntry(const Tokenizer& tokenizer, const TokenLogprob& lp,
                              int64_t text_offset) {
  LogprobEntry e;
  e.token = tokenizer.TokenBytes(lp.token);
  e.logprob = lp.logprob;
  for (const auto& [id, v] : lp.top) e.top.emplace_back(tokenizer.TokenBytes(id), v);
  e.text_offset = text_offset;
  return e;
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
      if (e.param == "model") e.code = "model_not_found";
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

std::string CompletionJson(const ResponseMeta& meta, const std::vector<ChoiceDelta>& choices,
                           const Usage& usage) {
  json out = json::array();
  for (const ChoiceDelta& c : choices) {
    json choice = {{"index", c.index}, {"finish_reason", c.finish_reason}};
    if (meta.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = LogprobsObject(c, meta.chat);
    out.push_back(std::move(choice));
  }
  json j = Head(meta, meta.chat ? "chat.completion" : "text_completion");
  j["choices"] = std::move(out);
  j["usage"] = UsageObject(usage);
  return Dump(j);
}

std::string ChunkJson(const ResponseMeta& meta, const ChoiceDelta& c) {
  json choice = {{"index", c.index}};
  if (meta.chat) {
    json d = json::object();
    if (c.role) {
      d["role"] = "assistant";
    } else if (!c.text.empty()) {
      d["content"] = c.text;
    }
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = c.logprobs.empty() ? json(nullptr) : LogprobsObject(c, meta.chat);
  choice["finish_reason"] = c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
  json j = Head(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array({std::move(choice)});
  if (meta.include_usage) j["usage"] = nullptr;
  return Dump(j);
}

std::string UsageChunkJson(const ResponseMeta& meta, const Usage& usage) {
  json j = Head(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = UsageObject(usage);
  return Dump(j);
}

std::string ModelsJson(const std::vector<std::string>& names, int64_t created) {
  json data = json::array();
  for (const std::string& name : names) data.push_back(ModelObject(name, created));
  return Dump(json{{"object", "list"}, {"data", std::move(data)}});
}

std::string ModelJson(const std::string& name, int64_t created) {
  return Dump(ModelObject(name, created));
}

std::string SseEvent(absl::string_view json_text) {
  return absl::StrCat("data: ", json_text, "\n\n");
}

}  // namespace ladder
