#include "src/serve/json_constraint.h"

#include <time.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ladder {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// A few KB of text to train a small BPE on: verses (so English words merge)
// and JSON (so `{"`, `":`, `", "` and friends become tokens).
const char kVerses[] =
    "In the beginning God created the heaven and the earth. And the earth was without form, "
    "and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the "
    "face of the waters. And God said, Let there be light: and there was light. And God saw the "
    "light, that it was good: and God divided the light from the darkness. And God called the "
    "light Day, and the darkness he called Night. And the evening and the morning were the first "
    "day. And God said, Let there be a firmament in the midst of the waters, and let it divide "
    "the waters from the waters. And God made the firmament, and divided the waters which were "
    "under the firmament from the waters which were above the firmament: and it was so. ";
const char kJsonish[] =
    "{\"name\": \"Adam\", \"age\": 930, \"tags\": [\"a\", \"b\"], \"ok\": true}\n"
    "{\"name\":\"Eve\",\"age\":12,\"tags\":[\"c\"],\"extra\":null}\n"
    "[{\"id\": 1, \"kids\": [\"ab\", \"c\"]}, {\"id\": -20}]\n"
    "{\"x\": 3.25e-2, \"y\": [1, 2], \"z\": \"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00\"}\n";

Tokenizer SmallBpe() {
  std::string text;
  for (int i = 0; i < 3; ++i) text += std::string(kVerses) + kJsonish;
  absl::StatusOr<Tokenizer> tok = Tokenizer::Train(text, 600);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *tok;
}

// A GPT-2 style vocabulary: the 256 bytes plus <|endoftext|>.
Tokenizer BytesWithEndOfText() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  tokens.push_back(std::string(Tokenizer::kEndOfText));
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromGpt2TokenBytes(tokens, 256);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *tok;
}

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Whether `v` is valid against `schema` (the supported subset), and for
// objects with properties, whether they come in the schema's order.
bool Valid(const ordered_json& v, const json& schema) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("anyOf")) {
    for (const json& alt : schema["anyOf"])
      if (Valid(v, alt)) return true;
    return false;
  }
  if (schema.contains("const")) return json::parse(v.dump()) == schema["const"];
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& e : schema["enum"]) found = found || json::parse(v.dump()) == e;
    if (!found) return false;
  }
  if (!schema.contains("type")) return true;
  std::vector<std::string> types;
  if (schema["type"].is_string()) {
    types.push_back(schema["type"]);
  } else {
    for (const json& t : schema["type"]) types.push_back(t);
  }
  for (const std::string& t : types) {
    if (t == "null" && v.is_null()) return true;
    if (t == "boolean" && v.is_boolean()) return true;
    if (t == "integer" && v.is_number_integer()) return true;
    if (t == "number" && v.is_number()) return true;
    if (t == "string" && v.is_string()) {
      const size_t n = CodePoints(v.get<std::string>());
      if (n >= schema.value("minLength", 0u) && n <= schema.value("maxLength", 1u << 30))
        return true;
    }
    if (t == "array" && v.is_array()) {
      bool ok = v.size() >= schema.value("minItems", 0u) &&
                v.size() <= schema.value("maxItems", 1u << 30);
      for (const ordered_json& item : v) ok = ok && Valid(item, schema.value("items", json(true)));
      if (ok) return true;
    }
    if (t == "object" && v.is_object()) {
      if (!schema.contains("properties")) {
        if (schema.value("additionalProperties", true) || v.empty()) return true;
        continue;
      }
      bool ok = true;
      std::vector<std::string> names;
      for (const auto& [name, sub] : schema["properties"].items()) names.push_back(name);
      size_t next = 0;  // properties come in order
      for (const auto& [name, value] : v.items()) {
        auto it = std::find(names.begin() + next, names.end(), name);
        ok = ok && it != names.end() && Valid(value, schema["properties"][name]);
        if (it != names.end()) next = it - names.begin() + 1;
      }
      for (const json& r : schema.value("required", json::array())) ok = ok && v.contains(r);
      if (ok) return true;
    }
  }
  return false;
}

JsonConstraint* AsJson(const std::shared_ptr<TokenConstraint>& c) {
  auto* j = dynamic_cast<JsonConstraint*>(c.get());
  EXPECT_NE(j, nullptr);
  return j;
}

int Shortest(const std::shared_ptr<TokenConstraint>& c) {
  int s = -1;
  EXPECT_TRUE(AsJson(c)->Lookahead("", &s));
  return s;
}

std::vector<int32_t> Ids(const std::vector<char>& allowed) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < allowed.size(); ++i)
    if (allowed[i]) ids.push_back(static_cast<int32_t>(i));
  return ids;
}

// Allowed by brute force: each token's bytes stepped one by one through
// Lookahead, then the budget rule.
std::vector<char> BruteAllowed(const Tokenizer& tok, JsonConstraint* c, int budget) {
  std::vector<int> shortest(tok.vocab_size(), -1);
  int best = 1 << 30;
  bool any = false;
  for (int32_t t = 0; t < tok.vocab_size(); ++t) {
    if (t == tok.end_of_text() || tok.TokenBytes(t).empty()) continue;
    int s = 0;
    if (!c->Lookahead(tok.TokenBytes(t), &s)) continue;
    shortest[t] = s;
    best = std::min(best, s);
    any = any || s <= budget - 1;
  }
  std::vector<char> allowed(tok.vocab_size(), 0);
  for (int32_t t = 0; t < tok.vocab_size(); ++t)
    if (shortest[t] >= 0) allowed[t] = any ? shortest[t] <= budget - 1 : shortest[t] == best;
  return allowed;
}

// Walks: uniform among the allowed tokens until Done or the budget is
// spent. Returns the text.
std::string Walk(const Tokenizer& tok, const std::shared_ptr<TokenConstraint>& c, int budget,
                 std::mt19937* rng, bool check_brute) {
  std::string text;
  std::vector<char> allowed;
  for (int used = 0; used < budget && !c->Done(); ++used) {
    c->Allowed(budget - used, &allowed);
    if (check_brute && (*rng)() % 4 == 0) {
      EXPECT_EQ(allowed, BruteAllowed(tok, AsJson(c), budget - used)) << "after " << text;
      // And a budget too small to finish: the shortest way forward.
      std::vector<char> tight;
      c->Allowed(1, &tight);
      EXPECT_EQ(tight, BruteAllowed(tok, AsJson(c), 1)) << "after " << text;
    }
    const std::vector<int32_t> ids = Ids(allowed);
    EXPECT_FALSE(ids.empty()) << "nothing allowed after " << text;
    if (ids.empty()) break;
    const int32_t t = ids[(*rng)() % ids.size()];
    EXPECT_TRUE(c->Accept(t).ok()) << t;
    text += tok.TokenBytes(t);
  }
  return text;
}

const char* const kSchemas[] = {
    R"({"type": "object", "properties": {
          "name": {"type": "string", "minLength": 1, "maxLength": 8},
          "age": {"type": "integer"},
          "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]},
                   "minItems": 1, "maxItems": 3},
          "ok": {"type": "boolean"},
          "extra": {"type": ["number", "null"]}},
        "required": ["name", "tags", "age"], "additionalProperties": false})",
    R"({"anyOf": [
          {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
          {"type": "object", "properties": {"x": {"type": "string", "maxLength": 3},
                                            "y": {"const": [1, 2]}}, "required": ["x"]},
          {"type": "array", "items": {"type": "integer"}, "maxItems": 3}]})",
    R"({"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {
          "id": {"type": "integer"},
          "kids": {"type": "array", "items": {"type": "string", "maxLength": 2}, "maxItems": 2}},
        "required": ["id"]}})",
    R"({"type": "number"})",
    R"({"enum": [1, 12, "x", null, {"k": [true]}]})",
    R"({"type": ["integer", "string", "null"], "maxLength": 2})",
    R"({"type": "string", "minLength": 3, "maxLength": 5})",
    R"({"type": "object", "additionalProperties": false})",
    R"({})",
};

// Random walks from tight to loose budgets: every text parses, matches its
// schema, and stays within the budget.
void RandomWalks(const Tokenizer& tok, bool check_brute, int walks_per_budget) {
  JsonConstraintFactory factory(tok);
  std::mt19937 rng(std::random_device{}());
  const unsigned seed = rng();
  rng.seed(seed);
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::vector<std::pair<std::string, json>> cases = {{"json_object", json{{"type", "object"}}}};
  for (const char* s : kSchemas) cases.emplace_back(s, json::parse(s));
  for (const auto& [name, schema] : cases) {
    SCOPED_TRACE(name);
    auto make = [&, &schema = schema, &name = name] {
      if (name == "json_object") return factory.Object();
      auto c = factory.Schema(schema);
      EXPECT_TRUE(c.ok()) << c.status();
      return *c;
    };
    const int shortest = Shortest(make());
    for (int budget : {shortest, shortest + 1, shortest + 4, 2 * shortest + 10, 80}) {
      for (int w = 0; w < walks_per_budget; ++w) {
        auto c = make();
        const std::string text = Walk(tok, c, budget, &rng, check_brute);
        SCOPED_TRACE(testing::Message() << "budget " << budget << ": " << text);
        ordered_json v;
        ASSERT_NO_THROW(v = ordered_json::parse(text));
        EXPECT_TRUE(Valid(v, schema));
        if (name == "json_object") {
          EXPECT_TRUE(v.is_object());
        }
        // Done once complete; only a top-level number may stop short of it
        // (it needs its terminating whitespace).
        if (!c->Done()) {
          EXPECT_TRUE(v.is_number());
        }
      }
    }
  }
}

TEST(JsonConstraintTest, RandomWalksOverBytesParseAndMatch) {
  RandomWalks(Tokenizer::ByteLevel(), false, 6);
}

TEST(JsonConstraintTest, RandomWalksOverBpeParseAndMatch) { RandomWalks(SmallBpe(), false, 6); }

// (d): the trie walk, its pruning and the budget rule against per-token
// lookahead, at random states of random walks.
TEST(JsonConstraintTest, AllowedEqualsBruteForce) { RandomWalks(SmallBpe(), true, 3); }

TEST(JsonConstraintTest, BpeHasJsonTokens) {
  // The walks above exercise multi-byte tokens that cross JSON structure.
  const Tokenizer tok = SmallBpe();
  int structural = 0;
  for (int32_t t = 256; t < tok.vocab_size(); ++t) {
    const std::string& b = tok.TokenBytes(t);
    structural += b == "{\"" || b == "\":" || b == "\", \"" || b == "\": ";
  }
  EXPECT_GE(structural, 2);
}

absl::Status AcceptText(TokenConstraint* c, const std::string& text) {
  for (char b : text) {
    absl::Status s = c->Accept(static_cast<uint8_t>(b));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

TEST(JsonConstraintTest, AcceptRefusesAndKeepsTheState) {
  const Tokenizer tok = SmallBpe();
  JsonConstraintFactory factory(tok);
  auto c = factory.Object();
  ASSERT_TRUE(AcceptText(c.get(), "{\"a\": [1, ").ok());
  std::vector<char> before, after;
  c->Allowed(1000, &before);
  const int shortest = Shortest(c);
  const int32_t close_brace = tok.byte_id('}');
  ASSERT_FALSE(before[close_brace]);
  absl::Status s = c->Accept(close_brace);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "token 125 (\"}\") cannot continue the JSON text");
  EXPECT_EQ(c->Accept(-1).message(), "token -1 is never allowed in JSON");
  c->Allowed(1000, &after);
  EXPECT_EQ(before, after);
  EXPECT_EQ(Shortest(c), shortest);
  EXPECT_FALSE(c->Done());
  // And it goes on as before: `2]}` completes it.
  ASSERT_TRUE(AcceptText(c.get(), "2]}").ok());
  EXPECT_TRUE(c->Done());
  c->Allowed(5, &after);
  EXPECT_TRUE(Ids(after).empty());
  EXPECT_FALSE(c->Accept(' ').ok());
}

TEST(JsonConstraintTest, EndOfTextIsNeverAllowed) {
  const Tokenizer tok = BytesWithEndOfText();
  JsonConstraintFactory factory(tok);
  auto c = factory.Object();
  std::vector<char> allowed;
  ASSERT_TRUE(AcceptText(c.get(), "{").ok());
  c->Allowed(1, &allowed);  // only `}` fits
  EXPECT_EQ(Ids(allowed), std::vector<int32_t>{'}'});
  c->Allowed(100, &allowed);
  EXPECT_FALSE(allowed[256]);
  EXPECT_EQ(c->Accept(256).message(), "token 256 is never allowed in JSON");
}

// What the byte automaton accepts, byte by byte: lexical corner cases.
bool AcceptsAll(const std::shared_ptr<TokenConstraint>& c, const std::string& text) {
  return AcceptText(c.get(), text).ok();
}

TEST(JsonConstraintTest, LexicalRules) {
  JsonConstraintFactory factory(Tokenizer::ByteLevel());
  auto any = [&] { return *factory.Schema(json::object()); };
  auto object = [&] { return factory.Object(); };
  // Numbers: RFC 8259 and the digit bounds.
  EXPECT_TRUE(AcceptsAll(any(), "[-0.5e+10, 0, 1E2, 123]"));
  EXPECT_FALSE(AcceptsAll(any(), "[01"));
  EXPECT_FALSE(AcceptsAll(any(), "[1.]"));
  EXPECT_FALSE(AcceptsAll(any(), "[-]"));
  EXPECT_FALSE(AcceptsAll(any(), "[.5"));
  EXPECT_FALSE(AcceptsAll(any(), "[1e]"));
  EXPECT_TRUE(AcceptsAll(any(), "[1234567890123456"));
  EXPECT_FALSE(AcceptsAll(any(), "[12345678901234567"));
  EXPECT_FALSE(AcceptsAll(any(), "[1e100"));
  // Strings: escapes, surrogate pairs, UTF-8.
  EXPECT_TRUE(AcceptsAll(any(), "\"a\\n\\\"\\u00e9\\ud83d\\ude00\xc3\xa9\xf0\x9f\x98\x80\""));
  EXPECT_FALSE(AcceptsAll(any(), "\"\\x"));
  EXPECT_FALSE(AcceptsAll(any(), "\"\\ude00"));    // a lone low surrogate
  EXPECT_FALSE(AcceptsAll(any(), "\"\\ud83d\""));  // a high one alone
  EXPECT_FALSE(AcceptsAll(any(), "\"\\ud83d\\u0041"));
  EXPECT_FALSE(AcceptsAll(any(), "\"\xc0\xaf"));      // overlong
  EXPECT_FALSE(AcceptsAll(any(), "\"\xed\xa0\x80"));  // an encoded surrogate
  EXPECT_FALSE(AcceptsAll(any(), "\"\xc3\""));        // cut inside a character
  EXPECT_FALSE(AcceptsAll(any(), "\"\x01"));          // a raw control character
  // Whitespace: bounded runs, none after the value.
  EXPECT_TRUE(AcceptsAll(object(), "\n{" + std::string(kMaxWhitespace, ' ') + "}"));
  EXPECT_FALSE(AcceptsAll(object(), "{" + std::string(kMaxWhitespace + 1, ' ')));
  EXPECT_FALSE(AcceptsAll(object(), "{} "));
  EXPECT_FALSE(AcceptsAll(object(), "[]"));
  EXPECT_FALSE(AcceptsAll(object(), "{\"a\" 1"));
  EXPECT_FALSE(AcceptsAll(object(), "{\"a\":1,}"));
  // A top-level number ends at one whitespace byte.
  auto n = any();
  ASSERT_TRUE(AcceptsAll(n, "-12"));
  EXPECT_FALSE(n->Done());
  ASSERT_TRUE(AcceptsAll(n, "\n"));
  EXPECT_TRUE(n->Done());
}

TEST(JsonConstraintTest, SchemaShapesTheObject) {
  JsonConstraintFactory factory(Tokenizer::ByteLevel());
  const json schema = json::parse(kSchemas[0]);  // properties: age, extra, name, ok, tags
  auto make = [&] { return *factory.Schema(schema); };
  EXPECT_TRUE(AcceptsAll(make(), R"({"age": 3, "name": "x", "tags": ["a"]})"));
  EXPECT_TRUE(
      AcceptsAll(make(), R"({"age":3,"extra":null,"name":"x","ok":true,"tags":["a","c"]})"));
  EXPECT_FALSE(AcceptsAll(make(), R"({"name")"));                        // out of order
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3, "tags")"));              // skips required "name"
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3.5)"));                    // an integer
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3})"));                     // required missing
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3, "other")"));             // not a property
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3, "name": "")"));          // minLength 1
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3, "name": "123456789)"));  // maxLength 8
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3, "name": "x", "tags": [])"));  // minItems 1
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3, "name": "x", "tags": ["a","b","c",)"));
  EXPECT_FALSE(AcceptsAll(make(), R"({"age": 3, "name": "x", "tags": ["d")"));
  // The shortest completion from the start: {"age":0,"name":"?","tags":["a"]}
  EXPECT_EQ(Shortest(make()), 33);
  // With a budget of 1 the shortest way forward is still allowed.
  auto c = make();
  std::vector<char> allowed;
  c->Allowed(1, &allowed);
  EXPECT_EQ(Ids(allowed), std::vector<int32_t>{'{'});
}

// Fresh() starts over on the same compiled schema: a copy made from a
// constraint halfway through its text accepts what a newly compiled one
// accepts and allows what it allows, and neither copy's steps move the
// other.
TEST(JsonConstraintTest, FreshStartsOverOnTheSameSchema) {
  const Tokenizer tok = SmallBpe();
  JsonConstraintFactory factory(tok);
  const json schema = json::parse(kSchemas[0]);
  auto used = *factory.Schema(schema);
  ASSERT_TRUE(AcceptText(used.get(), R"({"age": 3, "na)").ok());
  std::vector<char> used_allowed;
  used->Allowed(1000, &used_allowed);
  const int used_shortest = Shortest(used);

  auto fresh = used->Fresh();
  auto compiled = *factory.Schema(schema);
  std::vector<char> a, b;
  fresh->Allowed(1000, &a);
  compiled->Allowed(1000, &b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(Shortest(fresh), Shortest(compiled));
  EXPECT_EQ(Shortest(fresh), 33);
  const std::string text = R"({"age": 3, "name": "x", "tags": ["a"]})";
  ASSERT_TRUE(AcceptText(fresh.get(), text).ok());
  EXPECT_TRUE(fresh->Done());
  EXPECT_FALSE(AcceptText(fresh->Fresh().get(), R"({"age": 3.5)").ok());

  // The first constraint is where it was.
  used->Allowed(1000, &a);
  EXPECT_EQ(a, used_allowed);
  EXPECT_EQ(Shortest(used), used_shortest);
  ASSERT_TRUE(AcceptText(used.get(), R"(me": "x", "tags": ["a"]})").ok());
  EXPECT_TRUE(used->Done());
  // So is an Object() copy's language: any object.
  EXPECT_TRUE(AcceptsAll(factory.Object()->Fresh(), R"({"q": [1, {"r": null}]})"));
}

TEST(JsonConstraintTest, LengthsCountCodePoints) {
  JsonConstraintFactory factory(Tokenizer::ByteLevel());
  auto one = [&] { return *factory.Schema(json::parse(R"({"type": "string", "maxLength": 1})")); };
  for (const char* text : {"\"\\ud83d\\ude00\"", "\"\xf0\x9f\x98\x80\"", "\"\\n\""}) {
    auto c = one();
    EXPECT_TRUE(AcceptsAll(c, text)) << text;
    EXPECT_TRUE(c->Done()) << text;
  }
  EXPECT_FALSE(AcceptsAll(one(),
                          "\"\xc3\xa9"
                          "a"));
  EXPECT_FALSE(AcceptsAll(one(), "\"\\ud83d\\ude00\\n"));
}

TEST(JsonConstraintTest, OrderedSchemaKeepsItsPropertyOrder) {
  JsonConstraintFactory factory(Tokenizer::ByteLevel());
  const char kSchema[] = R"({"type": "object", "properties": {"b": {"type": "null"},
                            "a": {"type": "null"}}, "required": ["b", "a"]})";
  auto ordered = *factory.Schema(ordered_json::parse(kSchema));
  EXPECT_TRUE(AcceptsAll(ordered, R"({"b": null, "a": null})"));
  EXPECT_TRUE(ordered->Done());
  EXPECT_FALSE(AcceptsAll(*factory.Schema(ordered_json::parse(kSchema)), R"({"a")"));
  // nlohmann::json iterates its keys sorted.
  EXPECT_TRUE(AcceptsAll(*factory.Schema(json::parse(kSchema)), R"({"a": null, "b": null})"));
}

TEST(JsonConstraintTest, SchemaErrorsNameKeywordAndPointer) {
  JsonConstraintFactory factory(Tokenizer::ByteLevel());
  const std::string p = "response_format.json_schema.schema: ";
  const std::vector<std::pair<const char*, std::string>> cases = {
      {R"({"type": "object", "properties": {"name": {"type": "string", "pattern": "a+"}}})",
       "unsupported keyword 'pattern' at /properties/name"},
      {R"({"$ref": "#/defs/a"})", "unsupported keyword '$ref' at /"},
      {R"({"type": "array", "items": {"anyOf": [{"type": "string", "format": "date"}]}})",
       "unsupported keyword 'format' at /items/anyOf/0"},
      {R"({"type": "object", "properties": {"a/b~": {"minimum": 1}}})",
       "unsupported keyword 'minimum' at /properties/a~1b~0"},
      {R"({"type": "strin"})", "unknown type 'strin' at /"},
      {R"({"type": []})", "'type' must be a type name or a non-empty list of them at /"},
      {R"({"type": "string", "minLength": -1})", "'minLength' must be a non-negative integer at /"},
      {R"({"type": "string", "minLength": 3, "maxLength": 2})",
       "'minLength' is greater than 'maxLength' at /"},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})",
       "'minItems' is greater than 'maxItems' at /"},
      {R"({"minLength": 2})", "keyword 'minLength' needs a 'type' that includes 'string' at /"},
      {R"({"type": "string", "items": {}})",
       "keyword 'items' needs a 'type' that includes 'array' at /"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})",
       "'required' names 'b', which 'properties' does not define at /"},
      {R"({"type": "object", "properties": {"a": {}}, "additionalProperties": true})",
       "'additionalProperties' must be false beside 'properties' at /"},
      {R"({"type": "object", "additionalProperties": {"type": "string"}})",
       "'additionalProperties' must be a boolean at /"},
      {R"({"type": "array", "items": [{}]})", "'items' must be a schema at /"},
      {R"({"anyOf": []})", "'anyOf' must be a non-empty array of schemas at /"},
      {R"({"anyOf": [{}], "type": "string"})", "'anyOf' cannot be combined with 'type' at /"},
      {R"({"enum": []})", "'enum' must be a non-empty array at /"},
      {R"({"type": "string", "enum": ["a"], "minLength": 1})",
       "'enum' cannot be combined with 'minLength' at /"},
      {R"({"enum": [1], "const": 1})", "'enum' cannot be combined with 'const' at /"},
      {R"({"type": "string", "enum": [1, 2]})", "no value of 'enum' has the schema's 'type' at /"},
      {R"({"type": "object", "properties": {"a": false}})",
       "a schema of false admits no value at /properties/a"},
      {R"([1])", "a schema must be an object or true at /"},
  };
  for (const auto& [schema, message] : cases) {
    absl::StatusOr<std::shared_ptr<TokenConstraint>> c = factory.Schema(json::parse(schema));
    ASSERT_FALSE(c.ok()) << schema;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(c.status().message(), p + message) << schema;
  }
  // Deep nesting is refused, not recursed into without end.
  json deep = json::object();
  for (int i = 0; i < 100; ++i) deep = json{{"type", "array"}, {"items", deep}};
  absl::StatusOr<std::shared_ptr<TokenConstraint>> c = factory.Schema(deep);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("nests deeper than 64 levels"), std::string::npos);
  // So is a huge one.
  json wide = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 5000; ++i)
    wide["properties"][absl::StrCat("p", 10000 + i)] = {{"type", "string"}, {"maxLength", 1}};
  c = factory.Schema(wide);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            p + "the schema has more than 4096 subschemas at /properties/p14087");
}

double ThreadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Allowed's cost on a 50k vocabulary, in CPU time (the machine may be
// shared): inside a string with no maxLength, where almost every token may
// come next, and inside one with a maxLength, where every character counts
// and the trie is walked byte by byte. The figures go to the test's output.
TEST(JsonConstraintTest, AllowedIsFastOnALargeVocabulary) {
  // Pseudo-words over a wide alphabet make a BPE with many long tokens.
  std::mt19937 rng(7);
  std::string text;
  const std::string letters = "abcdefghijklmnopqrstuvwxyz";
  std::vector<std::string> words;
  for (int i = 0; i < 30000; ++i) {
    std::string w = " ";
    const int len = 2 + rng() % 9;
    for (int j = 0; j < len; ++j) w += letters[rng() % letters.size()];
    words.push_back(w);
  }
  for (int i = 0; i < 200000; ++i)
    text += words[std::min(rng() % words.size(), rng() % words.size())];
  absl::StatusOr<Tokenizer> tok = Tokenizer::Train(text, 50257);
  ASSERT_TRUE(tok.ok());
  ASSERT_EQ(tok->vocab_size(), 50257);
  JsonConstraintFactory factory(*tok);
  auto bounded = factory.Schema(json::parse(
      R"({"type": "object", "properties": {"key": {"type": "string", "maxLength": 1000}}})"));
  ASSERT_TRUE(bounded.ok());
  const std::pair<const char*, std::shared_ptr<TokenConstraint>> cases[] = {
      {"a string", factory.Object()}, {"a string with maxLength", *bounded}};
  for (const auto& [where, c] : cases) {
    ASSERT_TRUE(AcceptText(c.get(), "{\"key\": \"some text").ok());
    std::vector<char> allowed;
    const int kCalls = 20;
    const double t0 = ThreadCpuMs();
    for (int i = 0; i < kCalls; ++i) c->Allowed(1000, &allowed);
    const double ms = (ThreadCpuMs() - t0) / kCalls;
    std::printf("vocabulary %d, inside %s: Allowed %.2f ms of CPU per call, %zu tokens allowed\n",
                tok->vocab_size(), where, ms, Ids(allowed).size());
    EXPECT_GT(Ids(allowed).size(), tok->vocab_size() / 2);
    EXPECT_LT(ms, 50);  // loose, for slow machines; the figure is the point
  }
  // Along random walks (every kind of state), the mean and the worst call.
  std::mt19937 walk_rng(11);
  double total = 0, worst = 0;
  int calls = 0;
  for (int w = 0; w < 4; ++w) {
    auto c = factory.Object();
    std::vector<char> allowed;
    for (int used = 0; used < 60 && !c->Done(); ++used, ++calls) {
      const double t0 = ThreadCpuMs();
      c->Allowed(60 - used, &allowed);
      const double ms = ThreadCpuMs() - t0;
      total += ms;
      worst = std::max(worst, ms);
      const std::vector<int32_t> ids = Ids(allowed);
      ASSERT_FALSE(ids.empty());
      ASSERT_TRUE(c->Accept(ids[walk_rng() % ids.size()]).ok());
    }
  }
  std::printf(
      "vocabulary %d, random json_object walks: Allowed %.2f ms of CPU per call on "
      "average, %.2f ms at worst (%d calls)\n",
      tok->vocab_size(), total / calls, worst, calls);
  EXPECT_LT(total / calls, 50);
}

}  // namespace
}  // namespace ladder
