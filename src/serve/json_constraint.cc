#include "src/serve/json_constraint.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace ladder {

namespace {

// Lengths saturate here ("unreachable"): far beyond any budget.
constexpr int32_t kInf = 1 << 29;
int32_t Add(int64_t a, int64_t b) { return static_cast<int32_t>(std::min<int64_t>(kInf, a + b)); }
int32_t Mul(int64_t a, int64_t b) { return static_cast<int32_t>(std::min<int64_t>(kInf, a * b)); }

constexpr int kMaxIntDigits = 16, kMaxFracDigits = 16, kMaxExpDigits = 2;
// Bounds on a client's schema: its nesting (the compiler recurses), and its
// size (undecided anyOf alternatives multiply the automaton's stacks, at
// most as many as there are subschemas).
constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxSchemaNodes = 4096;

// Annotation keywords: allowed anywhere in a schema, and ignored.
bool IsAnnotation(const std::string& key) {
  static const std::set<std::string> kAnnotations = {"title",    "description", "default",
                                                     "examples", "$comment",    "$schema"};
  return kAnnotations.count(key) > 0;
}

// Bytes that stand for themselves inside a JSON string: printable ASCII but
// the quote and the backslash.
bool PlainText(uint8_t c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

bool IsWs(uint8_t c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
// A UTF-8 continuation byte's allowed range, as Frame::pos holds it.
int32_t Range(int32_t lo, int32_t hi) { return lo | (hi << 8); }
int HexValue(uint8_t c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Compact JSON text of a value; invalid UTF-8 (only possible in values built
// in code) becomes U+FFFD rather than throwing.
template <typename Json>
std::string Compact(const Json& v) {
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

// The tokens and their trie. Trie nodes are stored so that a node's children
// are contiguous (sorted by byte), which keeps the walk cache-friendly.
struct JsonVocabulary {
  struct TrieNode {
    uint8_t byte = 0;  // the edge into this node
    int32_t first_child = 0, num_children = 0;
    int32_t first_token = 0, num_tokens = 0;  // ids whose bytes end here
    // The ids of the whole subtree are trie_tokens[first_token, subtree_end).
    int32_t subtree_end = 0;
    // Every byte from here down is plain string text (see PlainText).
    bool plain = false;
  };
  std::vector<std::string> tokens;  // bytes of each id
  int32_t end_of_text = -1;
  std::vector<TrieNode> trie;  // trie[0] is the root (the empty prefix)
  std::vector<int32_t> trie_tokens;
  int max_token_bytes = 0;

  explicit JsonVocabulary(const Tokenizer& tok);
  bool Usable(int32_t id) const {
    return id >= 0 && id < static_cast<int32_t>(tokens.size()) && id != end_of_text &&
           !tokens[id].empty();
  }

 private:
  // ids[lo, hi) share their first `depth` bytes and end at or below `node`.
  void Build(int32_t node, const std::vector<int32_t>& ids, size_t lo, size_t hi, size_t depth);
};

JsonVocabulary::JsonVocabulary(const Tokenizer& tok) : end_of_text(tok.end_of_text()) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < tok.vocab_size(); ++i) {
    tokens.push_back(tok.TokenBytes(i));
    if (Usable(i)) {
      ids.push_back(i);
      max_token_bytes = std::max<int>(max_token_bytes, tokens[i].size());
    }
  }
  // std::string compares bytes as unsigned, like the trie's byte order.
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  trie.emplace_back();
  Build(0, ids, 0, ids.size(), 0);
  // Children come after their parent, so one backward pass sees them first.
  for (size_t n = trie.size(); n-- > 0;) {
    TrieNode& t = trie[n];
    t.subtree_end = t.first_token + t.num_tokens;
    t.plain = n > 0 && PlainText(t.byte);
    for (int32_t c = t.first_child; c < t.first_child + t.num_children; ++c) {
      t.subtree_end = trie[c].subtree_end;
      t.plain = t.plain && trie[c].plain;
    }
  }
}

void JsonVocabulary::Build(int32_t node, const std::vector<int32_t>& ids, size_t lo, size_t hi,
                           size_t depth) {
  trie[node].first_token = static_cast<int32_t>(trie_tokens.size());
  while (lo < hi && tokens[ids[lo]].size() == depth) trie_tokens.push_back(ids[lo++]);
  trie[node].num_tokens = static_cast<int32_t>(trie_tokens.size()) - trie[node].first_token;
  // One child per distinct next byte, allocated together, then filled.
  std::vector<size_t> starts;
  for (size_t i = lo; i < hi; ++i)
    if (i == lo || tokens[ids[i]][depth] != tokens[ids[i - 1]][depth]) starts.push_back(i);
  starts.push_back(hi);
  const int32_t first = static_cast<int32_t>(trie.size());
  trie[node].first_child = first;
  trie[node].num_children = static_cast<int32_t>(starts.size()) - 1;
  for (size_t g = 0; g + 1 < starts.size(); ++g) {
    trie.emplace_back();
    trie.back().byte = static_cast<uint8_t>(tokens[ids[starts[g]]][depth]);
  }
  for (size_t g = 0; g + 1 < starts.size(); ++g)
    Build(first + static_cast<int32_t>(g), ids, starts[g], starts[g + 1], depth + 1);
}

// ---------------------------------------------------------------------------
// The grammar: schema nodes.

namespace {

enum class NodeKind : uint8_t {
  kAny,         // any JSON value
  kAnyOf,       // one of `alts`
  kObject,      // `props` in order, the optional ones optional, nothing else
  kFreeObject,  // any object
  kArray,       // `items`, between min_count and max_count of them
  kString,      // between min_count and max_count code points
  kNumber,
  kInteger,
  kLiteral,  // exactly one of `literals` (compact JSON texts)
};

struct Property {
  int32_t node = 0;
  bool required = false;
};

struct Node {
  NodeKind kind = NodeKind::kAny;
  int32_t shortest = 1;  // length of the shortest text of this node
  std::vector<int32_t> alts;
  // kObject: props[i]'s key (compact JSON, quotes included) is literals[i].
  std::vector<Property> props;
  // kObject: rest[p], the shortest text of the required properties from p
  // on, each as `,"key":value`; size props + 1.
  std::vector<int32_t> rest;
  int32_t items = 0;
  int32_t min_count = 0, max_count = kInf;
  std::vector<std::string> literals;
};

// Nodes every grammar starts with (the parts of "any JSON value").
enum FixedNode : int32_t {
  kAnyNode,
  kFreeObjectNode,
  kAnyArrayNode,
  kAnyStringNode,
  kNumberNode,
  kIntegerNode,
  kAnyLiteralNode,  // true, false, null
  kBooleanNode,
  kNullNode,
  kNumFixedNodes,
};

}  // namespace

struct JsonGrammar {
  std::vector<Node> nodes;
  int32_t root = kAnyNode;

  JsonGrammar() {
    nodes.resize(kNumFixedNodes);
    nodes[kAnyNode].kind = NodeKind::kAny;  // shortest 1: "0"
    nodes[kFreeObjectNode].kind = NodeKind::kFreeObject;
    nodes[kFreeObjectNode].shortest = 2;
    nodes[kAnyArrayNode].kind = NodeKind::kArray;
    nodes[kAnyArrayNode].items = kAnyNode;
    nodes[kAnyArrayNode].shortest = 2;
    nodes[kAnyStringNode].kind = NodeKind::kString;
    nodes[kAnyStringNode].shortest = 2;
    nodes[kNumberNode].kind = NodeKind::kNumber;
    nodes[kIntegerNode].kind = NodeKind::kInteger;
    SetLiterals(kAnyLiteralNode, {"true", "false", "null"});
    SetLiterals(kBooleanNode, {"true", "false"});
    SetLiterals(kNullNode, {"null"});
  }

  void SetLiterals(int32_t n, std::vector<std::string> literals) {
    Node& node = nodes[n];
    node.kind = NodeKind::kLiteral;
    node.shortest = kInf;
    for (const std::string& l : literals)
      node.shortest = std::min<int32_t>(node.shortest, static_cast<int32_t>(l.size()));
    node.literals = std::move(literals);
  }
  int32_t Add(Node node) {
    nodes.push_back(std::move(node));
    return static_cast<int32_t>(nodes.size()) - 1;
  }
};

// ---------------------------------------------------------------------------
// Schema compilation.

namespace {

std::string PointerPart(const std::string& key) {
  return absl::StrReplaceAll(key, {{"~", "~0"}, {"/", "~1"}});
}

// Either nlohmann::json or nlohmann::ordered_json: properties come out in
// the order the schema object iterates.
template <typename Json>
class SchemaCompiler {
 public:
  explicit SchemaCompiler(JsonGrammar* g) : g_(g) {}

  absl::StatusOr<int32_t> Compile(const Json& s, const std::string& at, int depth) {
    if (depth > kMaxSchemaDepth)
      return Error(at, absl::StrCat("the schema nests deeper than ", kMaxSchemaDepth, " levels"));
    if (g_->nodes.size() >= kMaxSchemaNodes)
      return Error(at, absl::StrCat("the schema has more than ", kMaxSchemaNodes, " subschemas"));
    if (s.is_boolean()) {
      if (s.template get<bool>()) return kAnyNode;
      return Error(at, "a schema of false admits no value");
    }
    if (!s.is_object()) return Error(at, "a schema must be an object or true");
    static const std::set<std::string> kKnown = {
        "type",  "enum",     "const",    "anyOf",     "properties", "required",
        "items", "minItems", "maxItems", "minLength", "maxLength",  "additionalProperties"};
    for (const auto& [key, value] : s.items())
      if (!IsAnnotation(key) && !kKnown.count(key))
        return Error(at, absl::StrCat("unsupported keyword '", key, "'"));

    if (s.contains("anyOf")) {
      for (const auto& [key, value] : s.items())
        if (key != "anyOf" && !IsAnnotation(key))
          return Error(at, absl::StrCat("'anyOf' cannot be combined with '", key, "'"));
      const Json& alts = s["anyOf"];
      if (!alts.is_array() || alts.empty())
        return Error(at, "'anyOf' must be a non-empty array of schemas");
      Node node;
      node.kind = NodeKind::kAnyOf;
      node.shortest = kInf;
      for (size_t i = 0; i < alts.size(); ++i) {
        absl::StatusOr<int32_t> alt = Compile(alts[i], absl::StrCat(at, "/anyOf/", i), depth + 1);
        if (!alt.ok()) return alt.status();
        node.alts.push_back(*alt);
        node.shortest = std::min(node.shortest, g_->nodes[*alt].shortest);
      }
      return g_->Add(std::move(node));
    }

    // The listed types, in order, without repeats.
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      std::vector<Json> names;
      if (t.is_array()) {
        names.assign(t.begin(), t.end());
      } else {
        names.push_back(t);
      }
      if (names.empty()) return Error(at, "'type' must be a type name or a non-empty list of them");
      static const std::set<std::string> kTypes = {"object",  "array",   "string", "number",
                                                   "integer", "boolean", "null"};
      for (const Json& n : names) {
        if (!n.is_string())
          return Error(at, "'type' must be a type name or a non-empty list of them");
        const std::string name = n.template get<std::string>();
        if (!kTypes.count(name)) return Error(at, absl::StrCat("unknown type '", name, "'"));
        if (std::find(types.begin(), types.end(), name) == types.end()) types.push_back(name);
      }
    }
    auto has_type = [&](const std::string& name) {
      return std::find(types.begin(), types.end(), name) != types.end();
    };
    static const std::vector<std::pair<std::string, std::string>> kTypeKeywords = {
        {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
        {"items", "array"},       {"minItems", "array"},  {"maxItems", "array"},
        {"minLength", "string"},  {"maxLength", "string"}};
    for (const auto& [keyword, type] : kTypeKeywords)
      if (s.contains(keyword) && !has_type(type))
        return Error(
            at, absl::StrCat("keyword '", keyword, "' needs a 'type' that includes '", type, "'"));

    if (s.contains("enum") || s.contains("const")) return CompileLiterals(s, at, types);
    if (types.empty()) return kAnyNode;

    Node any_of;
    any_of.kind = NodeKind::kAnyOf;
    any_of.shortest = kInf;
    for (const std::string& type : types) {
      absl::StatusOr<int32_t> n = CompileType(s, at, type, depth);
      if (!n.ok()) return n.status();
      if (types.size() == 1) return *n;
      any_of.alts.push_back(*n);
      any_of.shortest = std::min(any_of.shortest, g_->nodes[*n].shortest);
    }
    return g_->Add(std::move(any_of));
  }

 private:
  static absl::Status Error(const std::string& at, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("response_format.json_schema.schema: ", what, " at ", at.empty() ? "/" : at));
  }

  // A non-negative integer keyword, or `fallback` when absent.
  static absl::StatusOr<int32_t> Count(const Json& s, const std::string& at, const char* keyword,
                                       int32_t fallback) {
    if (!s.contains(keyword)) return fallback;
    const Json& v = s[keyword];
    if (v.is_number_unsigned())
      return static_cast<int32_t>(std::min<uint64_t>(v.template get<uint64_t>(), kInf));
    if (v.is_number_integer() && v.template get<int64_t>() >= 0)
      return static_cast<int32_t>(std::min<int64_t>(v.template get<int64_t>(), kInf));
    return Error(at, absl::StrCat("'", keyword, "' must be a non-negative integer"));
  }

  absl::StatusOr<int32_t> CompileLiterals(const Json& s, const std::string& at,
                                          const std::vector<std::string>& types) {
    for (const auto& [key, value] : s.items())
      if (key != "enum" && key != "const" && key != "type" && !IsAnnotation(key))
        return Error(at, absl::StrCat("'", s.contains("enum") ? "enum" : "const",
                                      "' cannot be combined with '", key, "'"));
    if (s.contains("enum") && s.contains("const"))
      return Error(at, "'enum' cannot be combined with 'const'");
    std::vector<Json> values;
    if (s.contains("const")) {
      values.push_back(s["const"]);
    } else {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) return Error(at, "'enum' must be a non-empty array");
      values.assign(e.begin(), e.end());
    }
    auto of_type = [](const Json& v, const std::string& type) {
      if (type == "object") return v.is_object();
      if (type == "array") return v.is_array();
      if (type == "string") return v.is_string();
      if (type == "number") return v.is_number();
      if (type == "integer") return v.is_number_integer();
      if (type == "boolean") return v.is_boolean();
      return v.is_null();
    };
    std::vector<std::string> literals;
    for (const Json& v : values) {
      bool keep = types.empty();
      for (const std::string& type : types) keep = keep || of_type(v, type);
      const std::string text = Compact(v);
      if (keep && std::find(literals.begin(), literals.end(), text) == literals.end())
        literals.push_back(text);
    }
    if (literals.empty())
      return Error(at, absl::StrCat("no value of '", s.contains("enum") ? "enum" : "const",
                                    "' has the schema's 'type'"));
    const int32_t n = g_->Add(Node());
    g_->SetLiterals(n, std::move(literals));
    return n;
  }

  absl::StatusOr<int32_t> CompileType(const Json& s, const std::string& at, const std::string& type,
                                      int depth) {
    if (type == "number") return kNumberNode;
    if (type == "integer") return kIntegerNode;
    if (type == "boolean") return kBooleanNode;
    if (type == "null") return kNullNode;
    if (type == "string") {
      absl::StatusOr<int32_t> lo = Count(s, at, "minLength", 0);
      if (!lo.ok()) return lo.status();
      absl::StatusOr<int32_t> hi = Count(s, at, "maxLength", kInf);
      if (!hi.ok()) return hi.status();
      if (*lo > *hi) return Error(at, "'minLength' is greater than 'maxLength'");
      if (*lo == 0 && *hi == kInf) return kAnyStringNode;
      Node node;
      node.kind = NodeKind::kString;
      node.min_count = *lo;
      node.max_count = *hi;
      node.shortest = Add(*lo, 2);
      return g_->Add(std::move(node));
    }
    if (type == "array") {
      absl::StatusOr<int32_t> lo = Count(s, at, "minItems", 0);
      if (!lo.ok()) return lo.status();
      absl::StatusOr<int32_t> hi = Count(s, at, "maxItems", kInf);
      if (!hi.ok()) return hi.status();
      if (*lo > *hi) return Error(at, "'minItems' is greater than 'maxItems'");
      int32_t items = kAnyNode;
      if (s.contains("items")) {
        if (!s["items"].is_object() && !s["items"].is_boolean())
          return Error(at, "'items' must be a schema");
        absl::StatusOr<int32_t> n = Compile(s["items"], at + "/items", depth + 1);
        if (!n.ok()) return n.status();
        items = *n;
      }
      Node node;
      node.kind = NodeKind::kArray;
      node.items = items;
      node.min_count = *lo;
      node.max_count = *hi;
      // "[" + items with commas + "]"
      const int32_t item = g_->nodes[items].shortest;
      node.shortest = *lo == 0 ? 2 : Add(Add(Mul(*lo, item), *lo - 1), 2);
      return g_->Add(std::move(node));
    }
    // object
    bool closed = false;
    if (s.contains("additionalProperties")) {
      const Json& ap = s["additionalProperties"];
      if (!ap.is_boolean()) return Error(at, "'additionalProperties' must be a boolean");
      closed = !ap.template get<bool>();
    }
    const bool has_props = s.contains("properties");
    if (has_props && s.contains("additionalProperties") && !closed)
      return Error(at, "'additionalProperties' must be false beside 'properties'");
    std::vector<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) return Error(at, "'required' must be an array of property names");
      for (const Json& name : r) {
        if (!name.is_string()) return Error(at, "'required' must be an array of property names");
        required.push_back(name.template get<std::string>());
      }
    }
    if (!has_props && !closed) {
      if (!required.empty())
        return Error(at, absl::StrCat("'required' names '", required[0],
                                      "', which 'properties' does not define"));
      return kFreeObjectNode;
    }
    Node node;
    node.kind = NodeKind::kObject;
    if (has_props) {
      const Json& props = s["properties"];
      if (!props.is_object()) return Error(at, "'properties' must be an object of schemas");
      for (const auto& [name, sub] : props.items()) {
        absl::StatusOr<int32_t> n =
            Compile(sub, absl::StrCat(at, "/properties/", PointerPart(name)), depth + 1);
        if (!n.ok()) return n.status();
        Property p;
        p.node = *n;
        p.required = std::find(required.begin(), required.end(), name) != required.end();
        node.props.push_back(p);
        node.literals.push_back(Compact(nlohmann::json(name)));
      }
    }
    for (const std::string& name : required) {
      const std::string key = Compact(nlohmann::json(name));
      if (std::find(node.literals.begin(), node.literals.end(), key) == node.literals.end())
        return Error(
            at, absl::StrCat("'required' names '", name, "', which 'properties' does not define"));
    }
    const size_t n = node.props.size();
    node.rest.assign(n + 1, 0);
    for (size_t p = n; p-- > 0;) {
      node.rest[p] = node.rest[p + 1];
      if (node.props[p].required)
        node.rest[p] = Add(
            node.rest[p], Add(node.literals[p].size() + 2, g_->nodes[node.props[p].node].shortest));
    }
    node.shortest = Add(node.rest[0] > 0 ? node.rest[0] - 1 : 0, 2);
    return g_->Add(std::move(node));
  }

  JsonGrammar* g_;
};

}  // namespace

// ---------------------------------------------------------------------------
// The automaton.

namespace {

enum class FrameKind : uint8_t { kRoot, kObject, kArray, kString, kNumber, kLiteral };

// Phases of each frame kind.
enum RootPhase : uint8_t { kRootBefore, kRootIn, kRootAfter, kRootDone };
enum ObjectPhase : uint8_t {
  kObjOpen,         // after '{'
  kObjKey,          // in a key
  kObjColon,        // after a key
  kObjBeforeValue,  // after ':'
  kObjValue,        // the value is the frame above
  kObjAfterValue,
  kObjAfterComma,
};
enum ArrayPhase : uint8_t { kArrOpen, kArrItem, kArrAfterItem, kArrAfterComma };
enum StringPhase : uint8_t {
  kStrChars,
  kStrUtf8,    // inside a multi-byte UTF-8 character
  kStrEscape,  // after '\'
  kStrHex,     // inside \uXXXX
  // After a high surrogate's \uXXXX: the low surrogate's \, u, and XXXX.
  kStrLowBackslash,
  kStrLowU,
  kStrLowHex,
};
enum NumberPhase : uint8_t {
  kNumStart,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumFracStart,
  kNumFrac,
  kNumExpStart,
  kNumExpSign,
  kNumExp,
};

// One value in progress. Plain data, compared field by field.
struct Frame {
  int32_t node = 0;  // grammar node
  FrameKind kind = FrameKind::kRoot;
  uint8_t phase = 0;
  uint8_t ws = 0;  // whitespace bytes in a row in the current gap
  uint8_t aux =
      0;  // String: UTF-8 bytes still due, or hex digits read; Number: digits in this part
  // String: code points so far (counted only while they matter: up to
  // minLength, or all under maxLength); Array: items so far; Object: the
  // first property that may still come.
  int32_t count = 0;
  // Literal and object key: the first candidate still matching; object
  // after its key: the property.
  int32_t sel = 0;
  // Literal and object key: bytes matched; String: the allowed range of the
  // next UTF-8 byte (lo | hi << 8), or the \u value so far.
  int32_t pos = 0;
  bool operator==(const Frame&) const = default;
};

// A stack as an immutable linked list: stepping replaces the top link and
// shares the rest, so a state costs one or two links per byte.
struct Link {
  Frame f;
  const Link* below = nullptr;
  int32_t below_shortest = 0;  // the shortest completion of everything below
};

// Links are allocated in blocks and released in stack order (the trie walk
// releases what a subtree allocated), so memory stays bounded by the depth.
class Arena {
 public:
  Link* New() {
    if (used_ == blocks_.size() * kBlock) blocks_.push_back(std::make_unique<Link[]>(kBlock));
    Link* l = &blocks_[used_ / kBlock][used_ % kBlock];
    ++used_;
    return l;
  }
  size_t Mark() const { return used_; }
  void Release(size_t mark) { used_ = mark; }

 private:
  static constexpr size_t kBlock = 4096;
  std::vector<std::unique_ptr<Link[]>> blocks_;
  size_t used_ = 0;
};

using Stacks = std::vector<const Link*>;

bool SameStack(const Link* a, const Link* b) {
  for (; a != b; a = a->below, b = b->below)
    if (a == nullptr || b == nullptr || !(a->f == b->f)) return false;
  return true;
}

// Steps stacks of one grammar byte by byte.
class Machine {
 public:
  Machine(const JsonGrammar& g, Arena* arena) : g_(g), arena_(arena) {}

  const Link* Push(const Link* below, const Frame& f) {
    Link* l = arena_->New();
    l->f = f;
    l->below = below;
    l->below_shortest = below == nullptr ? 0 : Add(below->below_shortest, OwnShortest(below->f));
    return l;
  }
  int32_t Shortest(const Link* top) const { return Add(top->below_shortest, OwnShortest(top->f)); }
  // Whether `top` is a string between characters, where plain text
  // (PlainText bytes) only adds characters.
  static bool InText(const Link* top) {
    return top->f.kind == FrameKind::kString && top->f.phase == kStrChars;
  }
  // For such a `top`: the shortest completion after `chars` more plain
  // characters, or -1 if maxLength forbids them.
  int32_t ShortestAfterText(const Link* top, int64_t chars) const {
    const Node& n = N(top->f);
    if (top->f.count + chars > n.max_count) return -1;
    return Add(top->below_shortest, 1 + std::max<int64_t>(0, n.min_count - top->f.count - chars));
  }
  static bool IsDone(const Link* top) {
    return top->f.kind == FrameKind::kRoot && top->f.phase == kRootDone;
  }

  // Appends to *out every stack that `top` becomes after byte c (none if c
  // cannot come next).
  void Step(const Link* top, uint8_t c, Stacks* out) {
    switch (top->f.kind) {
      case FrameKind::kRoot:
        return StepRoot(top, c, out);
      case FrameKind::kObject:
        return StepObject(top, c, out);
      case FrameKind::kArray:
        return StepArray(top, c, out);
      case FrameKind::kString:
        return StepString(top, c, out);
      case FrameKind::kNumber:
        return StepNumber(top, c, out);
      case FrameKind::kLiteral:
        return StepLiteral(top, c, out);
    }
  }

  // Removes repeated stacks; once one stack is done the text is complete,
  // so it alone remains.
  static void Normalize(Stacks* s) {
    if (s->size() < 2) return;
    for (const Link* l : *s)
      if (IsDone(l)) {
        s->assign(1, l);
        return;
      }
    size_t kept = 0;
    for (size_t i = 0; i < s->size(); ++i) {
      bool repeat = false;
      for (size_t j = 0; j < kept && !repeat; ++j) repeat = SameStack((*s)[i], (*s)[j]);
      if (!repeat) (*s)[kept++] = (*s)[i];
    }
    s->resize(kept);
  }

 private:
  const Node& N(const Frame& f) const { return g_.nodes[f.node]; }
  const Link* Replace(const Link* top, const Frame& f) { return Push(top->below, f); }

  // Whether candidate k of `lits` still matches a frame at (sel, pos).
  static bool Alive(const std::vector<std::string>& lits, int32_t k, int32_t sel, int32_t pos) {
    const std::string& a = lits[k];
    return static_cast<int32_t>(a.size()) >= pos &&
           std::memcmp(a.data(), lits[sel].data(), pos) == 0;
  }
  // The first candidate in [lo, hi) that matches (sel, pos) and has c next,
  // or -1.
  static int32_t Match(const std::vector<std::string>& lits, int32_t lo, int32_t hi, int32_t sel,
                       int32_t pos, uint8_t c) {
    for (int32_t k = lo; k < hi; ++k)
      if (static_cast<int32_t>(lits[k].size()) > pos && static_cast<uint8_t>(lits[k][pos]) == c &&
          Alive(lits, k, sel, pos))
        return k;
    return -1;
  }
  // The last key an object may write next when the first that may is p: up
  // to and including the first required property.
  static int32_t KeyEnd(const Node& n, int32_t p) {
    int32_t k = p;
    while (k < static_cast<int32_t>(n.props.size()) && !n.props[k].required) ++k;
    return std::min<int32_t>(k + 1, n.props.size());
  }

  // The shortest completion of this frame alone: what it still needs beyond
  // the frames above it.
  int32_t OwnShortest(const Frame& f) const {
    const Node& n = N(f);
    switch (f.kind) {
      case FrameKind::kRoot:
        return f.phase == kRootBefore ? n.shortest : 0;
      case FrameKind::kObject:
        return ObjectShortest(f, n);
      case FrameKind::kArray: {
        const int64_t item = g_.nodes[n.items].shortest;
        const int64_t min = n.min_count, done = f.count;
        switch (f.phase) {
          case kArrOpen:
            return min == 0 ? 1 : Add(Add(Mul(min, item), min - 1), 1);
          case kArrItem:
            return Add(Mul(std::max<int64_t>(0, min - done - 1), item + 1), 1);
          case kArrAfterItem:
            return Add(Mul(std::max<int64_t>(0, min - done), item + 1), 1);
          default:
            return Add(Add(item, Mul(std::max<int64_t>(0, min - done - 1), item + 1)), 1);
        }
      }
      case FrameKind::kString: {
        // The closing quote, and the characters minLength still wants
        // (counting the one in progress).
        const bool in_char = f.phase != kStrChars;
        const int32_t tail = 1 + std::max<int32_t>(0, n.min_count - f.count - (in_char ? 1 : 0));
        switch (f.phase) {
          case kStrChars:
            return tail;
          case kStrUtf8:
            return f.aux + tail;
          case kStrEscape:
            return 1 + tail;
          case kStrHex: {
            const int32_t top = f.aux >= 2 ? f.pos >> (4 * (f.aux - 2)) : 0;
            return 4 - f.aux + (top >= 0xD8 && top <= 0xDB ? 6 : 0) + tail;
          }
          case kStrLowBackslash:
            return 6 + tail;
          case kStrLowU:
            return 5 + tail;
          default:
            return 4 - f.aux + tail;
        }
      }
      case FrameKind::kNumber:
        return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac ||
                       f.phase == kNumExp
                   ? 0
                   : 1;
      case FrameKind::kLiteral: {
        int32_t best = kInf;
        for (int32_t k = 0; k < static_cast<int32_t>(n.literals.size()); ++k)
          if (Alive(n.literals, k, f.sel, f.pos))
            best = std::min<int32_t>(best, n.literals[k].size() - f.pos);
        return best;
      }
    }
    return kInf;
  }

  int32_t ObjectShortest(const Frame& f, const Node& n) const {
    if (n.kind == NodeKind::kFreeObject) {
      // Shortest: `"":0}` after a comma.
      switch (f.phase) {
        case kObjOpen:
          return 1;
        case kObjKey:
          return 3;  // the key's string is the frame above
        case kObjColon:
          return 3;
        case kObjBeforeValue:
          return 2;
        case kObjValue:
          return 1;
        case kObjAfterValue:
          return 1;
        default:
          return 5;
      }
    }
    // A property k written from here: its key's remaining bytes, ':', its
    // value, then the required ones after it, then '}'.
    auto via = [&](int32_t k, int32_t key_left) {
      return Add(Add(key_left + 1, g_.nodes[n.props[k].node].shortest), Add(n.rest[k + 1], 1));
    };
    switch (f.phase) {
      case kObjOpen:
        return Add(n.rest[0] > 0 ? n.rest[0] - 1 : 0, 1);
      case kObjKey: {
        int32_t best = kInf;
        for (int32_t k = f.count; k < KeyEnd(n, f.count); ++k)
          if (Alive(n.literals, k, f.sel, f.pos))
            best = std::min(best, via(k, static_cast<int32_t>(n.literals[k].size()) - f.pos));
        return best;
      }
      case kObjColon:
        return via(f.sel, 0);
      case kObjBeforeValue:
        return Add(g_.nodes[n.props[f.sel].node].shortest, Add(n.rest[f.sel + 1], 1));
      case kObjValue:
        return Add(n.rest[f.sel + 1], 1);
      case kObjAfterValue:
        return Add(n.rest[f.count], 1);
      default: {
        int32_t best = kInf;
        for (int32_t k = f.count; k < KeyEnd(n, f.count); ++k)
          best = std::min(best, via(k, static_cast<int32_t>(n.literals[k].size())));
        return best;
      }
    }
  }

  // Handles whitespace in a gap: true if c was whitespace (then *out has the
  // stepped stack, or nothing if the gap is full).
  bool Whitespace(const Link* top, uint8_t c, Stacks* out) {
    if (!IsWs(c)) return false;
    if (top->f.ws < kMaxWhitespace) {
      Frame f = top->f;
      ++f.ws;
      out->push_back(Replace(top, f));
    }
    return true;
  }

  // The parent after its child value completed. `closed`: the child ended
  // on its own last byte (not because a byte it cannot take came).
  const Link* ChildDone(const Link* parent, bool closed) {
    Frame f = parent->f;
    f.ws = 0;
    switch (f.kind) {
      case FrameKind::kRoot:
        f.phase = closed ? kRootDone : kRootAfter;
        break;
      case FrameKind::kArray:
        f.phase = kArrAfterItem;
        ++f.count;
        break;
      default:  // kObject
        if (f.phase == kObjKey) {
          f.phase = kObjColon;
        } else {
          f.phase = kObjAfterValue;
          if (N(f).kind == NodeKind::kObject) f.count = f.sel + 1;
        }
    }
    return Replace(parent, f);
  }
  // A child that finished at byte c.
  void Close(const Link* top, Stacks* out) { out->push_back(ChildDone(top->below, true)); }

  // The stacks where a value of `node` starts with byte c above `parent`
  // (already in the phase that holds a child).
  void StartValue(const Link* parent, int32_t node, uint8_t c, Stacks* out) {
    const Node& n = g_.nodes[node];
    Frame f;
    f.node = node;
    switch (n.kind) {
      case NodeKind::kAnyOf:
        for (int32_t alt : n.alts) StartValue(parent, alt, c, out);
        return;
      case NodeKind::kAny:
        if (c == '{') return StartValue(parent, kFreeObjectNode, c, out);
        if (c == '[') return StartValue(parent, kAnyArrayNode, c, out);
        if (c == '"') return StartValue(parent, kAnyStringNode, c, out);
        if (c == '-' || IsDigit(c)) return StartValue(parent, kNumberNode, c, out);
        return StartValue(parent, kAnyLiteralNode, c, out);
      case NodeKind::kObject:
      case NodeKind::kFreeObject:
        f.kind = FrameKind::kObject;
        if (c == '{') out->push_back(Push(parent, f));
        return;
      case NodeKind::kArray:
        f.kind = FrameKind::kArray;
        if (c == '[') out->push_back(Push(parent, f));
        return;
      case NodeKind::kString:
        f.kind = FrameKind::kString;
        if (c == '"') out->push_back(Push(parent, f));
        return;
      case NodeKind::kNumber:
      case NodeKind::kInteger:
        f.kind = FrameKind::kNumber;
        return StepNumber(Push(parent, f), c, out);
      case NodeKind::kLiteral:
        f.kind = FrameKind::kLiteral;
        return StepLiteral(Push(parent, f), c, out);
    }
  }

  void StepRoot(const Link* top, uint8_t c, Stacks* out) {
    Frame f = top->f;
    if (f.phase == kRootBefore) {
      if (Whitespace(top, c, out)) return;
      f.phase = kRootIn;
      f.ws = 0;
      return StartValue(Replace(top, f), f.node, c, out);
    }
    if (f.phase == kRootAfter && IsWs(c)) {
      f.phase = kRootDone;
      out->push_back(Replace(top, f));
    }
  }

  void StepObject(const Link* top, uint8_t c, Stacks* out) {
    const Node& n = N(top->f);
    const bool free = n.kind == NodeKind::kFreeObject;
    const int32_t props = static_cast<int32_t>(n.props.size());
    Frame f = top->f;
    switch (f.phase) {
      case kObjOpen:
      case kObjAfterValue:
      case kObjAfterComma:
        if (Whitespace(top, c, out)) return;
        f.ws = 0;
        if (c == '"') {
          if (f.phase == kObjAfterValue) return;
          f.phase = kObjKey;
          if (free) {
            Frame key;
            key.node = kAnyStringNode;
            key.kind = FrameKind::kString;
            out->push_back(Push(Replace(top, f), key));
            return;
          }
          f.pos = 0;
          f.sel = f.count;
          return StepObject(Replace(top, f), c, out);
        }
        if (c == '}' && f.phase != kObjAfterComma && (free || n.rest[f.count] == 0))
          return Close(top, out);
        if (c == ',' && f.phase == kObjAfterValue && (free || f.count < props)) {
          f.phase = kObjAfterComma;
          out->push_back(Replace(top, f));
        }
        return;
      case kObjKey: {  // schema objects only: free keys are string frames
        const int32_t k = Match(n.literals, f.count, KeyEnd(n, f.count), f.sel, f.pos, c);
        if (k < 0) return;
        f.sel = k;
        ++f.pos;
        if (f.pos == static_cast<int32_t>(n.literals[k].size())) f.phase = kObjColon;
        out->push_back(Replace(top, f));
        return;
      }
      case kObjColon:
        if (Whitespace(top, c, out)) return;
        if (c == ':') {
          f.ws = 0;
          f.phase = kObjBeforeValue;
          out->push_back(Replace(top, f));
        }
        return;
      case kObjBeforeValue:
        if (Whitespace(top, c, out)) return;
        f.ws = 0;
        f.phase = kObjValue;
        return StartValue(Replace(top, f), free ? kAnyNode : n.props[f.sel].node, c, out);
      default:
        return;  // kObjValue: the value is above
    }
  }

  void StepArray(const Link* top, uint8_t c, Stacks* out) {
    const Node& n = N(top->f);
    Frame f = top->f;
    if (f.phase == kArrItem) return;
    if (Whitespace(top, c, out)) return;
    f.ws = 0;
    if (c == ']' && f.phase != kArrAfterComma && f.count >= n.min_count) return Close(top, out);
    if (f.phase == kArrAfterItem) {
      if (c == ',' && f.count < n.max_count) {
        f.phase = kArrAfterComma;
        out->push_back(Replace(top, f));
      }
      return;
    }
    if (f.count >= n.max_count) return;
    f.phase = kArrItem;
    StartValue(Replace(top, f), n.items, c, out);
  }

  void StepString(const Link* top, uint8_t c, Stacks* out) {
    const Node& n = N(top->f);
    Frame f = top->f;
    // Inside long strings most bytes leave the frame as it was: share the
    // link then (the common case of the trie walk, which it keeps cheap).
    auto keep = [&] { out->push_back(f == top->f ? top : Replace(top, f)); };
    auto char_done = [&] {
      if (f.count < n.min_count || n.max_count < kInf) ++f.count;  // else no need to count
      f.phase = kStrChars;
      keep();
    };
    switch (f.phase) {
      case kStrChars:
        if (c == '"') {
          if (f.count >= n.min_count) Close(top, out);
          return;
        }
        if (f.count >= n.max_count || c < 0x20) return;
        if (c == '\\') {
          f.phase = kStrEscape;
          return keep();
        }
        if (c < 0x80) return char_done();
        // A UTF-8 lead byte: how many continuation bytes follow, and the
        // range of the first (excluding overlong forms and surrogates).
        f.phase = kStrUtf8;
        if (c >= 0xC2 && c <= 0xDF) {
          f.aux = 1;
          f.pos = Range(0x80, 0xBF);
        } else if (c == 0xE0) {
          f.aux = 2;
          f.pos = Range(0xA0, 0xBF);
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
          f.aux = 2;
          f.pos = Range(0x80, 0xBF);
        } else if (c == 0xED) {
          f.aux = 2;
          f.pos = Range(0x80, 0x9F);
        } else if (c == 0xF0) {
          f.aux = 3;
          f.pos = Range(0x90, 0xBF);
        } else if (c >= 0xF1 && c <= 0xF3) {
          f.aux = 3;
          f.pos = Range(0x80, 0xBF);
        } else if (c == 0xF4) {
          f.aux = 3;
          f.pos = Range(0x80, 0x8F);
        } else {
          return;
        }
        return keep();
      case kStrUtf8:
        if (c < (f.pos & 0xFF) || c > (f.pos >> 8)) return;
        if (--f.aux == 0) return char_done();
        f.pos = Range(0x80, 0xBF);
        return keep();
      case kStrEscape:
        if (c == 'u') {
          f.phase = kStrHex;
          f.aux = 0;
          f.pos = 0;
          return keep();
        }
        if (std::strchr("\"\\/bfnrt", c) != nullptr && c != 0) return char_done();
        return;
      case kStrHex:
      case kStrLowHex: {
        const int h = HexValue(c);
        if (h < 0) return;
        f.pos = f.pos * 16 + h;
        ++f.aux;
        if (f.phase == kStrLowHex) {
          // DC00..DFFF only.
          if ((f.aux == 1 && f.pos != 0xD) || (f.aux == 2 && f.pos < 0xDC)) return;
        } else if (f.aux == 2 && f.pos >= 0xDC && f.pos <= 0xDF) {
          return;  // a low surrogate with no high one before it
        }
        if (f.aux < 4) return keep();
        if (f.phase == kStrHex && f.pos >= 0xD800 && f.pos <= 0xDBFF) {
          f.phase = kStrLowBackslash;
          return keep();
        }
        return char_done();
      }
      case kStrLowBackslash:
        if (c != '\\') return;
        f.phase = kStrLowU;
        return keep();
      default:  // kStrLowU
        if (c != 'u') return;
        f.phase = kStrLowHex;
        f.aux = 0;
        f.pos = 0;
        return keep();
    }
  }

  // Numbers never end on their own: a byte that cannot continue one ends it
  // and goes to the parent.
  void StepNumber(const Link* top, uint8_t c, Stacks* out) {
    const Frame& f = top->f;
    const bool integer = N(f).kind == NodeKind::kInteger;
    Frame g = f;
    bool ok = false;
    auto to = [&](NumberPhase phase, int digits) {
      g.phase = phase;
      g.aux = static_cast<uint8_t>(digits);
      ok = true;
    };
    const bool digit = IsDigit(c);
    const bool dot = c == '.' && !integer;
    const bool exp = (c == 'e' || c == 'E') && !integer;
    switch (f.phase) {
      case kNumStart:
        if (c == '-') to(kNumMinus, 0);
        [[fallthrough]];
      case kNumMinus:
        if (c == '0')
          to(kNumZero, 1);
        else if (digit)
          to(kNumInt, 1);
        break;
      case kNumZero:
      case kNumInt:
        if (digit && f.phase == kNumInt && f.aux < kMaxIntDigits) to(kNumInt, f.aux + 1);
        if (dot) to(kNumFracStart, 0);
        if (exp) to(kNumExpStart, 0);
        break;
      case kNumFracStart:
      case kNumFrac:
        if (digit && f.aux < kMaxFracDigits) to(kNumFrac, f.aux + 1);
        if (exp && f.phase == kNumFrac) to(kNumExpStart, 0);
        break;
      case kNumExpStart:
        if (c == '+' || c == '-') to(kNumExpSign, 0);
        [[fallthrough]];
      case kNumExpSign:
        if (digit) to(kNumExp, 1);
        break;
      default:  // kNumExp
        if (digit && f.aux < kMaxExpDigits) to(kNumExp, f.aux + 1);
    }
    if (ok) out->push_back(Replace(top, g));
    if (OwnShortest(f) == 0) Step(ChildDone(top->below, false), c, out);
  }

  void StepLiteral(const Link* top, uint8_t c, Stacks* out) {
    const Frame& f = top->f;
    const std::vector<std::string>& lits = N(f).literals;
    const int32_t count = static_cast<int32_t>(lits.size());
    // Complete before c (and ending in a digit, else it would have closed):
    // c may end it like a number.
    if (f.pos > 0 && OwnShortest(f) == 0) Step(ChildDone(top->below, false), c, out);
    const int32_t k = Match(lits, 0, count, f.sel, f.pos, c);
    if (k < 0) return;
    Frame g = f;
    g.sel = k;
    ++g.pos;
    bool complete = false, longer = false;
    for (int32_t i = 0; i < count; ++i)
      if (Alive(lits, i, g.sel, g.pos)) {
        if (static_cast<int32_t>(lits[i].size()) == g.pos)
          complete = true;
        else
          longer = true;
      }
    if (complete && !longer && !IsDigit(c)) return Close(top, out);
    out->push_back(Replace(top, g));
  }

  const JsonGrammar& g_;
  Arena* arena_;
};

class JsonConstraintImpl final : public JsonConstraint {
 public:
  JsonConstraintImpl(std::shared_ptr<const JsonVocabulary> vocab,
                     std::shared_ptr<const JsonGrammar> grammar)
      : vocab_(std::move(vocab)), grammar_(std::move(grammar)) {
    Frame root;
    root.node = grammar_->root;
    stacks_.push_back({root});
  }

  std::shared_ptr<JsonConstraint> Fresh() const override {
    return std::make_shared<JsonConstraintImpl>(vocab_, grammar_);
  }

  void Allowed(int budget, std::vector<char>* allowed) const override {
    allowed->assign(vocab_->tokens.size(), 0);
    if (Done()) return;
    arena_.Release(0);
    Machine m(*grammar_, &arena_);
    levels_.resize(vocab_->max_token_bytes + 2);
    Load(&m, &levels_[0]);
    walk_.m = &m;
    walk_.budget = budget;
    walk_.allowed = allowed;
    walk_.any = false;
    walk_.best = kInf;
    walk_.best_tokens.clear();
    Walk(0, 0);
    walk_.m = nullptr;
    // No token fits the budget: the shortest way forward.
    if (!walk_.any)
      for (int32_t t : walk_.best_tokens) (*allowed)[t] = 1;
  }

  absl::Status Accept(int32_t token) override {
    if (!vocab_->Usable(token))
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " is never allowed in JSON"));
    arena_.Release(0);
    Machine m(*grammar_, &arena_);
    Stacks s;
    if (!Run(&m, vocab_->tokens[token], &s))
      return absl::InvalidArgumentError(absl::StrCat("token ", token, " (",
                                                     Compact(nlohmann::json(vocab_->tokens[token])),
                                                     ") cannot continue the JSON text"));
    stacks_.clear();
    for (const Link* top : s) {
      std::vector<Frame> frames;
      for (const Link* l = top; l != nullptr; l = l->below) frames.push_back(l->f);
      std::reverse(frames.begin(), frames.end());
      stacks_.push_back(std::move(frames));
    }
    return absl::OkStatus();
  }

  bool Done() const override {
    return stacks_.size() == 1 && stacks_[0].size() == 1 && stacks_[0][0].phase == kRootDone;
  }

  bool Lookahead(absl::string_view bytes, int* shortest) const override {
    arena_.Release(0);
    Machine m(*grammar_, &arena_);
    Stacks s;
    if (!Run(&m, bytes, &s)) return false;
    if (bytes.empty() && Done()) return false;
    *shortest = kInf;
    for (const Link* top : s) *shortest = std::min(*shortest, m.Shortest(top));
    return true;
  }

 private:
  // The committed stacks as links.
  void Load(Machine* m, Stacks* out) const {
    out->clear();
    for (const std::vector<Frame>& frames : stacks_) {
      const Link* top = nullptr;
      for (const Frame& f : frames) top = m->Push(top, f);
      out->push_back(top);
    }
  }
  // The committed stacks stepped through `bytes`; false if they die.
  bool Run(Machine* m, absl::string_view bytes, Stacks* s) const {
    Load(m, s);
    Stacks next;
    for (char b : bytes) {
      next.clear();
      for (const Link* top : *s) m->Step(top, static_cast<uint8_t>(b), &next);
      Machine::Normalize(&next);
      s->swap(next);
      if (s->empty()) return false;
    }
    return true;
  }

  // Visits the children of trie node `node`, whose prefix took the committed
  // stacks to levels_[depth].
  void Walk(int32_t node, int depth) const {
    const JsonVocabulary& v = *vocab_;
    const JsonVocabulary::TrieNode& parent = v.trie[node];
    const Stacks& cur = levels_[depth];
    Stacks& next = levels_[depth + 1];
    // Inside a string, a subtree of plain text only adds characters: its
    // tokens are judged by their length, without stepping (most of the
    // vocabulary, inside a string).
    bool in_text = true;
    for (const Link* top : cur) in_text = in_text && Machine::InText(top);
    for (int32_t child = parent.first_child; child < parent.first_child + parent.num_children;
         ++child) {
      const JsonVocabulary::TrieNode& t = v.trie[child];
      if (in_text && t.plain) {
        for (int32_t i = t.first_token; i < t.subtree_end; ++i) {
          const int32_t token = v.trie_tokens[i];
          const int64_t chars = static_cast<int64_t>(v.tokens[token].size()) - depth;
          int32_t shortest = -1;
          for (const Link* top : cur) {
            const int32_t s = walk_.m->ShortestAfterText(top, chars);
            if (s >= 0 && (shortest < 0 || s < shortest)) shortest = s;
          }
          if (shortest >= 0) Record(token, shortest);
        }
        continue;
      }
      const size_t mark = arena_.Mark();
      next.clear();
      for (const Link* top : cur) walk_.m->Step(top, t.byte, &next);
      Machine::Normalize(&next);
      if (!next.empty()) {
        if (t.num_tokens > 0) {
          int32_t shortest = kInf;
          for (const Link* top : next) shortest = std::min(shortest, walk_.m->Shortest(top));
          for (int32_t i = t.first_token; i < t.first_token + t.num_tokens; ++i)
            Record(v.trie_tokens[i], shortest);
        }
        if (t.num_children > 0) Walk(child, depth + 1);
      }
      arena_.Release(mark);
    }
  }
  void Record(int32_t token, int32_t shortest) const {
    if (shortest <= walk_.budget - 1) {
      (*walk_.allowed)[token] = 1;
      walk_.any = true;
      return;  // the best tokens matter only when none fits
    }
    if (shortest < walk_.best) {
      walk_.best = shortest;
      walk_.best_tokens.clear();
    }
    if (shortest == walk_.best) walk_.best_tokens.push_back(token);
  }

  std::shared_ptr<const JsonVocabulary> vocab_;
  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<std::vector<Frame>> stacks_;  // the state: each stack bottom first

  // Scratch for Allowed, Accept and Lookahead (one thread, see
  // token_constraint.h), kept to reuse its memory.
  mutable Arena arena_;
  mutable std::vector<Stacks> levels_;  // levels_[d]: the stacks after a d-byte prefix
  struct WalkState {
    Machine* m = nullptr;
    int budget = 0;
    std::vector<char>* allowed = nullptr;
    bool any = false;
    int32_t best = kInf;
    std::vector<int32_t> best_tokens;
  };
  mutable WalkState walk_;
};

}  // namespace

JsonConstraintFactory::JsonConstraintFactory(const Tokenizer& tokenizer)
    : vocab_(std::make_shared<const JsonVocabulary>(tokenizer)) {
  auto g = std::make_shared<JsonGrammar>();
  g->root = kFreeObjectNode;
  object_grammar_ = std::move(g);
}

JsonConstraintFactory::~JsonConstraintFactory() = default;

std::shared_ptr<JsonConstraint> JsonConstraintFactory::Object() const {
  return std::make_shared<JsonConstraintImpl>(vocab_, object_grammar_);
}

namespace {

template <typename Json>
absl::StatusOr<std::shared_ptr<JsonConstraint>> MakeSchemaConstraint(
    std::shared_ptr<const JsonVocabulary> vocab, const Json& schema) {
  auto g = std::make_shared<JsonGrammar>();
  SchemaCompiler<Json> compiler(g.get());
  absl::StatusOr<int32_t> root = compiler.Compile(schema, "", 0);
  if (!root.ok()) return root.status();
  g->root = *root;
  return std::shared_ptr<JsonConstraint>(
      std::make_shared<JsonConstraintImpl>(std::move(vocab), std::move(g)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<JsonConstraint>> JsonConstraintFactory::Schema(
    const nlohmann::json& schema) const {
  return MakeSchemaConstraint(vocab_, schema);
}

absl::StatusOr<std::shared_ptr<JsonConstraint>> JsonConstraintFactory::Schema(
    const nlohmann::ordered_json& schema) const {
  return MakeSchemaConstraint(vocab_, schema);
}

}  // namespace ladder
