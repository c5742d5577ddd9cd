// Log-probabilities of tokens under the model, for the API's `logprobs`
// (each generated token) and `echo` (each prompt token): the log-softmax of
// the raw logits at the token's position, before temperature, penalties,
// bias and constraints, so it scores the text the way the model sees it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace ladder {

// A token's log-probability and the most likely alternatives at its position.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  // The most likely tokens at that position, most likely first (ties by id),
  // as many as the request's `logprobs` asks.
  std::vector<std::pair<int32_t, float>> top;
};

// Scores `token` under `logits` (one per vocabulary entry; token inside it)
// with the `top` >= 0 most likely tokens (at most the vocabulary). The
// log-softmax is computed in double and reported as float. Costs one pass
// over the vocabulary, plus a partial sort of `top` entries when top > 0.
TokenLogprob ScoreToken(absl::Span<const float> logits, int32_t token, int top);

// log sum_i exp(logits_i), in double, shifted by the largest logit so no
// exponential overflows. `logits` is not empty.
double LogSumExp(absl::Span<const float> logits);

// KL(p || q) = sum_i p_i (log p_i - log q_i) of the softmaxes of two logit
// rows of the same length: how far the distribution `q` (a quantized
// model's, say) is from `p` (the reference's), in nats. In double.
double KlDivergence(absl::Span<const float> p_logits, absl::Span<const float> q_logits);

}  // namespace ladder
