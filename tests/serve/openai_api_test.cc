// The OpenAI request parser: good bodies give the right request; every
// malformed body is refused with InvalidArgument naming the field.
#include "src/serve/openai_api.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ladder {
namespace {

const ModelLimits kLimits{64, 256};

TEST(OpenAiApiTest, CompletionDefaults) {
  const Tokenizer tok = Tokenizer::ByteLevel();
  auto r = ParseCompletionRequest(R"({"model": "m", "prompt": "hi"})", tok, kLimits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, (std::vector<int32_t>{'h', 'i'}));
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
          "stream_options": {"include_usage": true}, "user": "ignored"})",
      tok, kLimits);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt, (std::vector<int32_t>{1, 2, 255}));
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
  EXPECT_EQ(r->prompt, std::vector<int32_t>(prompt.begin(), prompt.end()));
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
  const std::vector<BadCase> cases = {
      {false, "{", "", "not valid JSON"},
      {false, "", "", "not valid JSON"},
      {false, "[1, 2]", "", "must be a JSON object"},
      {false, R"({"max_tokens": 4})", "prompt", "'prompt' is required"},
      {false, R"({"prompt": null})", "prompt", "'prompt' is required"},
      {false, R"({"prompt": 5})", "prompt", "'prompt' must be a string or an array of token ids"},
      {false, R"({"prompt": ["a", "b"]})", "prompt", "element 0 is a string"},
      {false, R"({"prompt": [[1]]})", "prompt", "batches of prompts are not supported"},
      {false, R"({"prompt": [1, 256]})", "prompt", "outside the vocabulary [0, 256)"},
      {false, R"({"prompt": [-1]})", "prompt", "outside the vocabulary"},
      {false, R"({"prompt": [1.5]})", "prompt", "element 0 is a number"},
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
      {false, R"({"prompt": "hi", "n": 2})", "n", "'n' must be 1"},
      {false, R"({"prompt": "hi", "stop": 1})", "stop", "a string or an array of strings"},
      {false, R"({"prompt": "hi", "stop": ["a", 1]})", "stop", "a string or an array"},
      {false, R"({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4"},
      {false, R"({"prompt": "hi", "stop": ""})", "stop", "must not be empty"},
      {false, R"({"prompt": "hi", "stream": "yes"})", "stream", "'stream' must be a boolean"},
      {false, R"({"prompt": "hi", "stream_options": 1})", "stream_options", "an object"},
      {true, R"({"prompt": "hi"})", "messages", "'messages' is required"},
      {true, R"({"messages": "hi"})", "messages", "'messages' must be an array"},
      {true, R"({"messages": []})", "messages", "must not be empty"},
      {true, R"({"messages": [1]})", "messages[0]", "must be an object"},
      {true, R"({"messages": [{"content": "x"}]})", "messages[0].role", "is required"},
      {true, R"({"messages": [{"role": "bot", "content": "x"}]})", "messages[0].role",
       "must be system, user or assistant, got 'bot'"},
      {true, R"({"messages": [{"role": "user", "content": "x"}, {"role": 1, "content": "x"}]})",
       "messages[1].role", "must be a string"},
      {true, R"({"messages": [{"role": "user"}]})", "messages[0].content", "is required"},
      {true, R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content",
       "must be a string"},
      {true, R"({"messages": [{"role": "user", "content": ")" + long_prompt + R"("}]})", "messages",
       "context is 64 tokens"},
      {true, R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
       "max_completion_tokens", "must be in [1"},
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

TEST(OpenAiApiTest, ResponsesUseOpenAiFieldNames) {
  ResponseMeta meta{"cmpl-1", 123, "tiny", false};
  auto c = nlohmann::json::parse(CompletionJson(meta, "hey", "length", {3, 2}));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hey");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 5);
  auto chunk = nlohmann::json::parse(ChunkJson(meta, "he", ""));
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  meta.chat = true;
  auto chat = nlohmann::json::parse(CompletionJson(meta, "hey", "stop", {3, 2}));
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], "hey");
  auto delta = nlohmann::json::parse(ChunkJson(meta, "x", ""));
  EXPECT_EQ(delta["object"], "chat.completion.chunk");
  EXPECT_EQ(delta["choices"][0]["delta"]["content"], "x");
  auto role = nlohmann::json::parse(ChunkJson(meta, "", "", true));
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(SseEvent("{}"), "data: {}\n\n");
  // Invalid UTF-8 never breaks the JSON.
  EXPECT_NO_THROW(nlohmann::json::parse(CompletionJson(meta, "\xFF", "stop", {})));
}

}  // namespace
}  // namespace ladder
