// Constrained decoding: a rule for which tokens may come next, so that the
// generated text always belongs to a language (json_constraint.h: JSON, or
// JSON matching a schema). The engine masks every other token's logit to
// -inf before sampling, feeds the chosen token back, and ends the request
// (finish reason "stop") once the text is complete.
//
// Threads: one constraint belongs to one request and is used by the engine's
// thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace ladder {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Sets allowed[t] (one entry per vocabulary token, resized by the
  // callee) to 1 for each token that may come next, else 0, knowing that at
  // most `budget` >= 1 tokens remain including this one: a token is allowed
  // only if the text can still be completed within the budget, so a request
  // that runs to max_tokens still ends complete. At least one token is
  // allowed while !Done(); when the budget cannot complete the text (a
  // budget smaller than the shortest completion from the start), the
  // shortest way forward is allowed.
  virtual void Allowed(int budget, std::vector<char>* allowed) const = 0;
  // Advances past `token`. InvalidArgument (nothing changed) if Allowed
  // would not have allowed it with an unlimited budget.
  virtual absl::Status Accept(int32_t token) = 0;
  // True once the text so far is complete and nothing may follow.
  virtual bool Done() const = 0;
};

}  // namespace ladder
