// Constrained decoding for JSON (OpenAI's `response_format`): token
// constraints (token_constraint.h) whose text is one JSON object
// (`{"type": "json_object"}`) or one JSON value valid against a schema
// (`{"type": "json_schema", ...}`).
//
// How it works. Tokens are byte strings (Tokenizer::TokenBytes), so the
// grammar is a byte-level pushdown automaton: a stack of frames, one per
// value in progress (the root, objects, arrays, strings, numbers, literals),
// each frame a small state machine over bytes. `anyOf` (and a list of types)
// is nondeterministic: the state is a set of stacks, one per alternative still
// alive, and stacks that become equal merge again. Allowed walks a trie of the
// vocabulary's token bytes, stepping the automaton once per trie edge, so
// tokens that share a prefix share the work, and a subtree is skipped as soon
// as the automaton rejects its prefix.
//
// Budget. Every frame knows the length in bytes of its shortest completion,
// so every state does (the sum over its stack). Every byte is a token in
// ladder's byte-level tokenizers, so a token is allowed only if the shortest
// completion after it is at most budget - 1 bytes; when no token fits, the
// tokens after which the completion is shortest are allowed.
//
// The language. RFC 8259 JSON, with bounds that keep every output parseable
// and finite: at most kMaxWhitespace consecutive whitespace bytes between
// tokens (and before the value; none after it, except below); numbers with at
// most 16 digits before the point, 16 after it and 2 in the exponent (so every
// number fits a double and every integer an int64); strings are valid UTF-8
// with correct escapes (a \u escape of a UTF-16 high surrogate must be
// followed by one of a low surrogate). A number (or a number from `enum` or
// `const`) at the top level could always go on, so it ends at one whitespace
// byte after it, which JSON allows. Done is true once the value is complete.
//
// The schema subset (anything else is refused):
//   type                  "object", "array", "string", "number", "integer",
//                         "boolean", "null", or a non-empty list of them
//   properties, required  properties come out in the schema's order (see
//                         Schema below); the optional ones may be left out;
//                         no other property appears (additionalProperties may
//                         only be absent or false beside properties)
//   additionalProperties  a boolean; an object with no properties is any
//                         object unless it is false (then only {})
//   items, minItems, maxItems
//   minLength, maxLength  in Unicode code points (an escape, or an escaped
//                         surrogate pair, is one)
//   enum, const           the values in their compact form (no whitespace);
//                         beside them only `type`, which keeps the values of
//                         those types
//   anyOf                 on its own (beside annotations only)
//   title, description, default, examples, $comment, $schema: annotations,
//                         ignored
// Keywords that apply to one type (properties, items, minLength, ...) need a
// `type` that includes it. A schema of `true` or `{}` is any JSON value.
// Schemas nest at most 64 levels and hold at most 4096 subschemas (undecided
// anyOf alternatives multiply the automaton's stacks, so this bounds the
// work per token).
//
// Threads: the factory is immutable (any thread); each constraint is used by
// one thread at a time (token_constraint.h).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "src/serve/token_constraint.h"
#include "src/tokenizer/bpe.h"

namespace ladder {

// Whitespace bytes allowed in a row between two JSON tokens (enough for a
// newline and the indentation of a few levels).
inline constexpr int kMaxWhitespace = 8;

struct JsonVocabulary;  // the tokens' bytes and their trie (json_constraint.cc)
struct JsonGrammar;     // a compiled schema (json_constraint.cc)

// The constraints JsonConstraintFactory makes. Beyond TokenConstraint, it
// answers for any bytes what Allowed computes for whole tokens (tests compare
// the two).
class JsonConstraint : public TokenConstraint {
 public:
  // Whether `bytes` may follow the text so far (with an unlimited budget);
  // if so, sets *shortest to the length in bytes of the shortest completion
  // after them. Empty bytes: whether the constraint is not Done, and its
  // shortest completion now.
  virtual bool Lookahead(absl::string_view bytes, int* shortest) const = 0;
  // A new constraint at the start of the text, for the same language: it
  // shares this one's vocabulary and compiled schema (nothing is compiled
  // again) and has its own state, whatever this one has accepted. The n
  // candidates of one request each take one.
  virtual std::shared_ptr<JsonConstraint> Fresh() const = 0;
};

class JsonConstraintFactory {
 public:
  // Built once per tokenizer: copies the tokens' bytes and builds their trie
  // (the end-of-text token, and any token with no bytes, is never allowed).
  // Immutable and thread-safe after construction. The constraints it makes
  // share what they need with it, so they may outlive it; the tokenizer is
  // not used after construction.
  explicit JsonConstraintFactory(const Tokenizer& tokenizer);
  ~JsonConstraintFactory();

  // Any JSON object.
  std::shared_ptr<JsonConstraint> Object() const;
  // JSON valid against `schema` (the subset above). InvalidArgument naming
  // the unsupported keyword or malformed part and its JSON pointer, e.g.
  // "response_format.json_schema.schema: unsupported keyword 'pattern' at
  // /properties/name" (the schema itself is "/").
  // Properties come out in the order the schema object iterates:
  // nlohmann::json sorts keys, nlohmann::ordered_json keeps the order of the
  // text it was parsed from (what a client expects).
  absl::StatusOr<std::shared_ptr<JsonConstraint>> Schema(const nlohmann::json& schema) const;
  absl::StatusOr<std::shared_ptr<JsonConstraint>> Schema(
      const nlohmann::ordered_json& schema) const;

 private:
  std::shared_ptr<const JsonVocabulary> vocab_;
  std::shared_ptr<const JsonGrammar> object_grammar_;  // what Object() uses
};

}  // namespace ladder
