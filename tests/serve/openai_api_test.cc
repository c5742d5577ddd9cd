// The OpenAI request parser: good bodies give the right request; every
// malformed body is refused with InvalidArgument naming the field.
#include "src/serve/openai_api.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ladder {
namespace {

const ModelLimits kLimits{64, 256, {"tiny", "alias"}};

TEST(OpenAiApiTest, CompletionDefaults) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  auto r = ParseCompletionRequest(R"({"prompt": "hi"})", tok, kLimits);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0], (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(r->n, 1);
  EXPECT_EQ(r->best_of, 1);
  EXPECT_EQ(r->logprobs, -1);
  EXPECT_FALSE(r->echo);
  EXPECT_TRUE(r->sampling.logit_bias.empty());
  EXPECT_EQ(r->sampling.presence_penalty, 0);
  EXPECT_EQ(r->response_format.type, ResponseFormat::Type::kText);
  EXPECT_EQ(r->model, "tiny");
  EXPECT_EQ(r->max_tokens, 16);
  EXPECT_EQ(r->sampling.temperature, 1.0);
  EXPECT_EQ(r->sampling.top_p, 1.0);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_FALSE(r->has_seed);
  EXPECT_FALSE(r->stream);
  EXPECT_TRUE(r->stop.empty());
  EXPECT_FALSE(r->chat);
}

TEST(OpenAiApiTest, CompletionFields) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  auto r = ParseCompletionRequest(
      R"({"prompt": [1, 2, 255], "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 3,
          "seed": -1, "stop": ["a", "bc"], "stream": true, "n": 1,
          "stream_options": {"include_usage": true}, "user": "someone"})",
      tok, kLimits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompts, (std::vector<std::vector<int32_t>>{{1, 2, 255}}));
  EXPECT_EQ(r->max_tokens, 5);
  EXPECT_EQ(r->sampling.temperature, 0.0);
  EXPECT_EQ(r->sampling.top_p, 0.5);
  EXPECT_EQ(r->sampling.top_k, 3);
  EXPECT_TRUE(r->has_seed);
  EXPECT_EQ(r->seed, ~uint64_t{0});
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  auto single =
      ParseCompletionRequest(R"({"prompt": "x", "stop": "\n", "max_tokens": null})", tok, kLimits);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(single->stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(single->max_tokens, 16);
}

TEST(OpenAiApiTest, ChatTemplate) {
  EXPECT_EQ(RenderChat(
                {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}),
            "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello\n<|user|>\nBye\n"
            "<|assistant|>\n");
  const Tokenizer tok = Tokenizer::ByteLevel();
  auto r = ParseChatRequest(R"({"messages": [{"role": "user", "content": "Hi"}], "stop": "x"})",
                            tok, kLimits);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string prompt = "<|user|>\nHi\n<|assistant|>\n";
  EXPECT_EQ(r->prompts[0], std::vector<int32_t>(prompt.begin(), prompt.end()));
  EXPECT_TRUE(r->chat);
  // Chat defaults to the rest of the context; the turn ends at the next role.
  EXPECT_EQ(r->max_tokens, kLimits.context - static_cast<int>(prompt.size()));
  std::vector<std::string> stops = {"x"};
  for (const std::string& s : ChatStops()) stops.push_back(s);
  EXPECT_EQ(r->stop, stops);
}

struct BadCase {
  bool chat;
  std::string body;
  std::string param;    // the field named in the error's param
  std::string message;  // a substring of the message
};

TEST(OpenAiApiTest, MalformedBodiesNameTheField) {
  const std::string long_prompt(64, 'x');
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::vector<BadCase> cases = {
      {false, "{", "", "not valid JSON"},
      {false, "", "", "not valid JSON"},
      {false, "[1, 2]", "", "must be a JSON object"},
      {false, R"({"max_tokens": 4})", "prompt", "'prompt' is required"},
      {false, R"({"prompt": null})", "prompt", "'prompt' is required"},
      {false, R"({"prompt": 5})", "prompt",
       "'prompt' must be a string, an array of token ids, or an array of either"},
      {false, R"({"prompt": ["a", 1]})", "prompt", "mixes texts and token ids; element 1"},
      {false, R"({"prompt": [[1], []]})", "prompt", "'prompt[1]' must not be empty"},
      {false, R"({"prompt": [[1], [999]]})", "prompt", "'prompt[1]' element 0 (999) is outside"},
      {false, R"({"prompt": [1, 256]})", "prompt", "outside the vocabulary [0, 256)"},
      {false, R"({"prompt": [-1]})", "prompt", "outside the vocabulary"},
      {false, R"({"prompt": [1.5]})", "prompt", "element 0 must be a token id, got a number"},
      {false, R"({"prompt": []})", "prompt", "'prompt' must not be empty"},
      {false, R"({"prompt": ""})", "prompt", "'prompt' must not be empty"},
      {false, R"({"prompt": ")" + long_prompt + R"("})", "prompt", "context is 64 tokens"},
      {false, R"({"prompt": "hi", "model": 3})", "model", "'model' must be a string"},
      {false, R"({"prompt": "hi", "max_tokens": "5"})", "max_tokens",
       "'max_tokens' must be an integer, got a string"},
      {false, R"({"prompt": "hi", "max_tokens": 2.5})", "max_tokens", "must be an integer"},
      {false, R"({"prompt": "hi", "max_tokens": 0})", "max_tokens", "'max_tokens' must be in [1"},
      {false, R"({"prompt": "hi", "max_tokens": 63})", "max_tokens",
       "exceed the model's context of 64 tokens"},
      {false, R"({"prompt": "hi", "max_tokens": 18446744073709551615})", "max_tokens",
       "out of range"},
      {false, R"({"prompt": "hi", "temperature": "hot"})", "temperature", "must be a number"},
      {false, R"({"prompt": "hi", "temperature": -0.5})", "temperature", "[0, 2]"},
      {false, R"({"prompt": "hi", "top_p": 0})", "top_p", "(0, 1]"},
      {false, R"({"prompt": "hi", "top_k": -2})", "top_k", "'top_k' must be in"},
      {false, R"({"prompt": "hi", "seed": "1"})", "seed", "'seed' must be an integer"},
      {false, R"({"prompt": "hi", "n": 0})", "n", "'n' must be in [1, 128]"},
      {false, R"({"prompt": "hi", "n": 2, "best_of": 1})", "best_of",
       "'best_of' (1) must be at least 'n' (2)"},
      {false, R"({"prompt": "hi", "best_of": 3, "stream": true})", "best_of",
       "must equal 'n' when streaming"},
      {false, R"({"prompt": ["a", "b", "c"], "best_of": 50})", "best_of", "at most 128 sequences"},
      {false, R"({"prompt": "hi", "suffix": "x"})", "suffix",
       "'suffix' is not supported: the models only continue text"},
      {false, R"({"prompt": "hi", "frobnicate": 1})", "frobnicate",
       "'frobnicate' is not supported by ladder"},
      {false, R"({"prompt": "hi", "presence_penalty": 5})", "presence_penalty",
       "'presence_penalty' must be in [-2, 2], got 5"},
      {false, R"({"prompt": "hi", "frequency_penalty": "a"})", "frequency_penalty",
       "must be a number"},
      {false, R"({"prompt": "hi", "repetition_penalty": 0})", "repetition_penalty",
       "'repetition_penalty' must be in (0, 2], got 0"},
      {false, R"({"prompt": "hi", "logit_bias": {"300": 1}})", "logit_bias",
       "key '300' is not a token id in [0, 256)"},
      {false, R"({"prompt": "hi", "logit_bias": {"3": 101}})", "logit_bias",
       "values must be numbers in [-100, 100]"},
      {false, R"({"prompt": "hi", "logprobs": 6})", "logprobs", "'logprobs' must be in [0, 5]"},
      {false, R"({"prompt": "hi", "echo": 1})", "echo", "'echo' must be a boolean"},
      {false, R"({"prompt": "hi", "response_format": {"type": "yaml"}})", "response_format",
       "must be text, json_object or json_schema, got 'yaml'"},
      {false, R"({"prompt": "hi", "response_format": {"type": "json_schema"}})", "response_format",
       "must be an object with a 'schema'"},
      {false, R"({"prompt": "hi", "response_format": {"type": "text", "x": 1}})",
       "response_format.x", "is not supported"},
      {false, R"({"prompt": "hi", "stream_options": {"include_usage": true, "x": 1}})",
       "stream_options.x", "is not supported"},
      {false, R"({"prompt": "hi", "stop": 1})", "stop", "a string or an array of strings"},
      {false, R"({"prompt": "hi", "stop": ["a", 1]})", "stop", "a string or an array"},
      {false, R"({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4"},
      {false, R"({"prompt": "hi", "stop": ""})", "stop", "must not be empty"},
      {false, R"({"prompt": "hi", "stream": "yes"})", "stream", "'stream' must be a boolean"},
      {false, R"({"prompt": "hi", "stream_options": 1})", "stream_options", "an object"},
      {false, R"({"prompt": "hi", "stream_options": {"include_usage": true}})", "stream_options",
       "only allowed when 'stream' is true"},
      // Nesting past 128 levels (which dump() would recurse through) is
      // refused as the body parses, wherever it is.
      {false, R"({"prompt": "hi", "logit_bias": {"5": )" + deep + "}}", "",
       "nests deeper than 128 levels"},
      {false, R"({"prompt": "hi", "x": )" + deep + "}", "", "nests deeper than 128 levels"},
      {true, R"({"prompt": "hi"})", "prompt", "'prompt' is not supported by ladder"},
      {true, R"({"model": "tiny"})", "messages", "'messages' is required"},
      {true, R"({"messages": "hi"})", "messages", "'messages' must be an array"},
      {true, R"({"messages": []})", "messages", "must not be empty"},
      {true, R"({"messages": [1]})", "messages[0]", "must be an object"},
      {true, R"({"messages": [{"content": "x"}]})", "messages[0].role", "is required"},
      {true, R"({"messages": [{"role": "bot", "content": "x"}]})", "messages[0].role",
       "must be system, developer, user or assistant, got 'bot'"},
      {true, R"({"messages": [{"role": "tool", "content": "x"}]})", "messages[0].role",
       "'tool' is not supported: ladder does not call tools"},
      {true, R"({"messages": [{"role": "user", "content": "x", "name": "a"}]})", "messages[0].name",
       "is not supported"},
      {true, R"({"messages": [{"role": "assistant", "content": null, "tool_calls": []}]})",
       "messages[0].tool_calls", "ladder does not call tools"},
      {true, R"({"messages": [{"role": "user", "content": null}]})", "messages[0].content",
       "is required"},
      {true, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type", "\"image_url\" is not supported"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "tools": []})", "tools",
       "'tools' is not supported: ladder does not call tools"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})",
       "tool_choice", "only \"none\""},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", "echo",
       "'echo' is not supported by ladder"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "best_of": 2})", "best_of",
       "is not supported"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       "top_logprobs", "needs 'logprobs': true"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                 "top_logprobs": 21})",
       "top_logprobs", "must be in [0, 20]"},
      {true, R"({"messages": [{"role": "user", "content": "x"}, {"role": 1, "content": "x"}]})",
       "messages[1].role", "must be a string"},
      {true, R"({"messages": [{"role": "user"}]})", "messages[0].content", "is required"},
      {true, R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content[0]",
       "must be a content part object"},
      {true, R"({"messages": [{"role": "user", "content": ")" + long_prompt + R"("}]})", "messages",
       "context is 64 tokens"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
       "max_completion_tokens", "must be in [1"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                 "max_completion_tokens": 3})",
       "max_completion_tokens", "not both"},
  };
  const Tokenizer tok = Tokenizer::ByteLevel();
  for (const BadCase& c : cases) {
    auto r = c.chat ? ParseChatRequest(c.body, tok, kLimits)
                    : ParseCompletionRequest(c.body, tok, kLimits);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    const ApiError e = ErrorFromStatus(r.status());
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.message), std::string::npos)
        << c.body << " -> " << e.message << " (want '" << c.message << "')";
    // The error object is valid JSON with OpenAI's fields.
    const auto j = nlohmann::json::parse(ErrorJson(e));
    EXPECT_EQ(j["error"]["message"], e.message);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    if (c.param.empty()) {
      EXPECT_TRUE(j["error"]["param"].is_null());
    } else {
      EXPECT_EQ(j["error"]["param"], c.param);
    }
  }
}

TEST(OpenAiApiTest, NewFieldsParse) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  auto r = ParseCompletionRequest(
      R"({"model": "alias", "prompt": ["ab", [7, 8]], "n": 2, "best_of": 3, "logprobs": 2,
          "echo": true, "max_tokens": 0, "presence_penalty": -1.5, "frequency_penalty": 2,
          "repetition_penalty": 1.2, "logit_bias": {"5": -100, "9": 2.5},
          "response_format": {"type": "json_schema",
                              "json_schema": {"name": "x", "schema": {"type": "object"}}},
          "suffix": null, "tools": null})",
      tok, kLimits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "alias");
  EXPECT_EQ(r->prompts, (std::vector<std::vector<int32_t>>{{'a', 'b'}, {7, 8}}));
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->best_of, 3);
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(r->max_tokens, 0);  // scoring the prompt only: echo allows it
  EXPECT_EQ(r->sampling.presence_penalty, -1.5);
  EXPECT_EQ(r->sampling.frequency_penalty, 2);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.2);
  EXPECT_EQ(r->sampling.logit_bias, (std::vector<std::pair<int32_t, double>>{{5, -100}, {9, 2.5}}));
  EXPECT_EQ(r->response_format.type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(nlohmann::json::parse(r->response_format.schema), nlohmann::json({{"type", "object"}}));

  // Chat: content parts, the developer role, an assistant turn without
  // content, logprobs with top_logprobs.
  auto c = ParseChatRequest(
      R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "Be "},
                                                          {"type": "text", "text": "brief."}]},
                       {"role": "assistant", "content": null}, {"role": "user", "content": "Hi"}],
          "logprobs": true, "top_logprobs": 3, "tool_choice": "none",
          "response_format": {"type": "json_object"}})",
      tok, kLimits);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string prompt = "<|system|>\nBe brief.\n<|assistant|>\n\n<|user|>\nHi\n<|assistant|>\n";
  EXPECT_EQ(c->prompts[0], std::vector<int32_t>(prompt.begin(), prompt.end()));
  EXPECT_EQ(c->logprobs, 3);
  EXPECT_EQ(c->response_format.type, ResponseFormat::Type::kJsonObject);
  auto plain = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})",
                                tok, kLimits);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->logprobs, 0);
}

TEST(OpenAiApiTest, UnknownModelIsNotFound) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  for (const auto& s : {ParseCompletionRequest(R"({"model": "gpt-9", "prompt": "x"})", tok, kLimits)
                            .status(),
                        ParseChatRequest(R"({"model": "gpt-9", "messages": [{"role": "user",
                                             "content": "x"}]})", tok, kLimits)
                            .status(),
                        ParseEmbeddingRequest(R"({"model": "gpt-9", "input": "x"})", tok, kLimits, 8)
                            .status(),
                        ParseTokenizeRequest(R"({"model": "gpt-9", "prompt": "x"})", tok, kLimits)
                            .status()}) {
    ASSERT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    const ApiError e = ErrorFromStatus(s);
    EXPECT_EQ(e.http_status, 404);
    EXPECT_EQ(e.param, "model");
    EXPECT_EQ(e.code, "model_not_found");
    EXPECT_EQ(e.message, "The model 'gpt-9' does not exist (GET /v1/models lists the served ones)");
  }
}

TEST(OpenAiApiTest, EmbeddingsAndTokenize) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  auto e = ParseEmbeddingRequest(R"({"input": ["ab", [1, 2, 3]], "encoding_format": "base64",
                                     "dimensions": 8})",
                                 tok, kLimits, 8);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->inputs, (std::vector<std::vector<int32_t>>{{'a', 'b'}, {1, 2, 3}}));
  EXPECT_TRUE(e->base64);
  EXPECT_EQ(e->model, "tiny");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"input": "x", "dimensions": 4})", "'dimensions' must be the model's width, 8, got 4"},
      {R"({"input": "x", "encoding_format": "hex"})", "must be \"float\" or \"base64\""},
      {R"({"input": ""})", "'input' must not be empty"},
      {R"({"input": ")" + std::string(65, 'x') + R"("})", "'input' 0 has 65 tokens"},
      {R"({})", "'input' is required"},
  };
  for (const auto& [body, message] : bad) {
    auto r = ParseEmbeddingRequest(body, tok, kLimits, 8);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(std::string(r.status().message()).find(message), std::string::npos)
        << body << " -> " << r.status();
  }
  // base64 is the float32 values' little-endian bytes.
  auto j = nlohmann::json::parse(EmbeddingsJson("tiny", {{1.0f, -2.0f}}, true, 3));
  EXPECT_EQ(j["data"][0]["embedding"], "AACAPwAAAMA=");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  j = nlohmann::json::parse(EmbeddingsJson("tiny", {{0.5f}, {0.25f}}, false, 2));
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][1]["embedding"][0], 0.25);
  EXPECT_EQ(j["object"], "list");

  auto t = ParseTokenizeRequest(R"({"prompt": "hi"})", tok, kLimits);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, (std::vector<int32_t>{'h', 'i'}));
  auto m = ParseTokenizeRequest(R"({"messages": [{"role": "user", "content": "a"}]})", tok, kLimits);
  ASSERT_TRUE(m.ok());
  const std::string chat = "<|user|>\na\n<|assistant|>\n";
  EXPECT_EQ(*m, std::vector<int32_t>(chat.begin(), chat.end()));
  EXPECT_EQ(nlohmann::json::parse(TokenizeJson({1, 2}, 64)),
            nlohmann::json({{"tokens", {1, 2}}, {"count", 2}, {"max_model_len", 64}}));
  auto d = ParseDetokenizeRequest(R"({"tokens": [104, 105]})", kLimits);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<int32_t>{104, 105}));
  EXPECT_FALSE(ParseDetokenizeRequest(R"({"tokens": [256]})", kLimits).ok());
  EXPECT_FALSE(ParseTokenizeRequest(R"({"prompt": "a", "add_bos": true})", tok, kLimits).ok());
}

TEST(OpenAiApiTest, ResponsesUseOpenAiFieldNames) {
  ResponseMeta meta{"cmpl-1", 123, "tiny", false};
  ChoiceDelta hey;
  hey.text = "hey";
  hey.finish_reason = "length";
  auto c = nlohmann::json::parse(CompletionJson(meta, {hey}, {3, 2}));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hey");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(c["usage"]["total_tokens"], 5);
  ChoiceDelta he;
  he.text = "he";
  auto chunk = nlohmann::json::parse(ChunkJson(meta, he));
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  meta.chat = true;
  hey.finish_reason = "stop";
  hey.index = 1;
  auto chat = nlohmann::json::parse(CompletionJson(meta, {hey}, {3, 2}));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["index"], 1);
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hey");
  ChoiceDelta x;
  x.text = "x";
  auto delta = nlohmann::json::parse(ChunkJson(meta, x));
  EXPECT_EQ(delta["object"], "chat.completion.chunk");
  EXPECT_EQ(delta["choices"][0]["delta"]["content"], "x");
  ChoiceDelta role;
  role.role = true;
  auto r = nlohmann::json::parse(ChunkJson(meta, role));
  EXPECT_EQ(r["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(r.contains("usage"));
  // With stream_options.include_usage, every chunk says "usage": null until
  // the last one, which has no choices and the totals.
  meta.include_usage = true;
  auto with_usage = nlohmann::json::parse(ChunkJson(meta, x));
  ASSERT_TRUE(with_usage.contains("usage"));
  EXPECT_TRUE(with_usage["usage"].is_null());
  auto totals = nlohmann::json::parse(UsageChunkJson(meta, {3, 2}));
  EXPECT_TRUE(totals["choices"].empty());
  EXPECT_EQ(totals["usage"]["total_tokens"], 5);
  meta.include_usage = false;
  EXPECT_EQ(SseEvent("{}"), "data: {}\n\n");
  // Invalid UTF-8 never breaks the JSON.
  ChoiceDelta bad;
  bad.text = "\xFF";
  EXPECT_NO_THROW(nlohmann::json::parse(CompletionJson(meta, {bad}, {})));
  auto models = nlohmann::json::parse(ModelsJson({"a", "b"}, 7));
  EXPECT_EQ(models["data"][1]["id"], "b");
  EXPECT_EQ(nlohmann::json::parse(ModelJson("a", 7))["object"], "model");
}

TEST(OpenAiApiTest, LogprobShapes) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  TokenLogprob lp;
  lp.token = 'b';
  lp.logprob = -0.5f;
  lp.top = {{'b', -0.5f}, {'c', -1.5f}};
  ChoiceDelta c;
  c.text = "ab";
  c.has_logprobs = true;
  LogprobEntry first;  // an echoed prompt's first token has no log-probability
  first.token = "a";
  c.logprobs = {first, MakeLogprobEntry(tok, lp, 1)};
  ResponseMeta meta{"cmpl-1", 1, "tiny", false};
  auto j = nlohmann::json::parse(CompletionJson(meta, {c}, {}))["choices"][0]["logprobs"];
  EXPECT_EQ(j["tokens"], nlohmann::json({"a", "b"}));
  EXPECT_TRUE(j["token_logprobs"][0].is_null());
  EXPECT_EQ(j["token_logprobs"][1], -0.5);
  EXPECT_TRUE(j["top_logprobs"][0].is_null());
  EXPECT_EQ(j["top_logprobs"][1], nlohmann::json({{"b", -0.5}, {"c", -1.5}}));
  EXPECT_EQ(j["text_offset"], nlohmann::json({0, 1}));
  meta.chat = true;
  c.logprobs = {MakeLogprobEntry(tok, lp, 0)};
  j = nlohmann::json::parse(CompletionJson(meta, {c}, {}))["choices"][0]["logprobs"];
  EXPECT_TRUE(j["refusal"].is_null());
  EXPECT_EQ(j["content"][0]["token"], "b");
  EXPECT_EQ(j["content"][0]["logprob"], -0.5);
  EXPECT_EQ(j["content"][0]["bytes"], nlohmann::json({98}));
  EXPECT_EQ(j["content"][0]["top_logprobs"][1],
            nlohmann::json({{"token", "c"}, {"logprob", -1.5}, {"bytes", {99}}}));
  // A streamed chunk carries the logprobs of its own tokens.
  auto chunk = nlohmann::json::parse(ChunkJson(meta, c));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"][0]["token"], "b");
}

}  // namespace
}  // namespace ladder
