// Next-token sampling from logits: logit adjustments (penalties and bias),
// then temperature, top-k, top-p (nucleus), or greedy, and the acceptance
// rule of speculative decoding built on the same distributions. Each caller
// owns its RNG stream, so a request's tokens depend only on its own seed,
// never on what else runs beside it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "src/backend/token_sampling.h"
#include "src/core/philox.h"

namespace ladder {

struct SamplingParams {
  SamplingParams() = default;
  // The distribution's shape; the adjustments keep their neutral defaults.
  SamplingParams(double temp, int k, double p) : temperature(temp), top_k(k), top_p(p) {}

  double temperature = 1.0;  // 0: greedy (argmax)
  int top_k = 0;             // 0: no top-k cut
  double top_p = 1.0;        // 1: no nucleus cut

  // Logit adjustments (AdjustLogits), applied to a copy of the model's
  // logits before everything above. Defaults change nothing.
  // OpenAI's penalties, in [-2, 2], over the tokens generated so far (not
  // the prompt): a token generated c > 0 times loses
  // c * frequency_penalty + presence_penalty.
  double presence_penalty = 0;
  double frequency_penalty = 0;
  // Hugging Face's repetition penalty, > 0 (1: off), over the prompt and the
  // tokens generated so far: each such token's logit l becomes l / penalty
  // if l > 0, else l * penalty, so a penalty above 1 never raises it.
  double repetition_penalty = 1.0;
  // OpenAI's logit_bias: (token, bias in [-100, 100]) pairs, each bias added
  // to its token's logit (-100 in effect bans it, 100 in effect forces it).
  // The ids are checked against the vocabulary by whoever knows it (the
  // engine's Submit).
  std::vector<std::pair<int32_t, double>> logit_bias;

  // True when any adjustment is not neutral.
  bool AdjustsLogits() const;
  // InvalidArgument naming the first field out of range, e.g.
  // "presence_penalty must be in [-2, 2], got 5".
  absl::Status Validate() const;
};

// What the penalties count: a request's prompt and the tokens it has
// generated so far. Holds only the distinct tokens seen, so adjusting a row
// costs time in their number, not the vocabulary's size.
class TokenHistory {
 public:
  explicit TokenHistory(absl::Span<const int32_t> prompt);
  // Records one generated token.
  void Add(int32_t token);
  // Generated tokens and how often each came (presence and frequency).
  const std::unordered_map<int32_t, int>& generated() const { return generated_; }
  // Every token of the prompt or the output (repetition).
  const std::unordered_set<int32_t>& seen() const { return seen_; }

 private:
  std::unordered_map<int32_t, int> generated_;
  std::unordered_set<int32_t> seen_;
};

// Applies params' adjustments to `logits` (one per vocabulary entry, every
// id of the history and the bias inside it) in place, in this order: the
// repetition penalty, then the presence and frequency penalties, then the
// bias. Each step touches only the tokens it names.
void AdjustLogits(const SamplingParams& params, const TokenHistory& history,
                  absl::Span<float> logits);

// The distribution SampleToken draws from, one probability per vocabulary
// entry: params' temperature, top_k and top_p through TokenWeights
// (src/backend/token_sampling.h, the definition the backends' SampleTokens
// share).
std::vector<double> TokenDistribution(absl::Span<const float> logits, const SamplingParams& params);

// Draws index i with probability weights[i] / sum(weights) (the weights need
// not be normalized), with exactly one uniform from `rng` (DrawToken).
int32_t SampleFrom(absl::Span<const double> weights, PhiloxStream* rng);

// Draws one token id from `logits` (one per vocabulary entry) by
// TokenDistribution. Greedy draws no random numbers; otherwise exactly one
// uniform from `rng`.
int32_t SampleToken(absl::Span<const float> logits, const SamplingParams& params,
                    PhiloxStream* rng);

// Speculative sampling (Leviathan et al. 2023, Chen et al. 2023). A draft
// model proposed proposals[j], drawn from draft[j] (its TokenDistribution at
// that position); `target` holds the target model's logits at the
// proposals' positions plus one more, (K + 1) rows of V. Walking the
// proposals in order, proposal x is accepted with probability
// min(1, p(x) / q(x)); the first rejected one is replaced by a draw from the
// residual max(0, p - q) (normalized), and if all K pass a bonus token is
// drawn from the last row's p. Every token that comes out is then
// distributed exactly as if the target had sampled it itself, whatever the
// draft proposed. With greedy params p and q are one-hot, so this is
// "accept while the draft's token is the target's argmax", then the argmax.
struct Verdict {
  int accepted = 0;  // leading proposals kept
  int32_t next = 0;  // the token after them (residual or bonus)
};
Verdict VerifyProposals(absl::Span<const int32_t> proposals,
                        const std::vector<std::vector<double>>& draft,
                        absl::Span<const float> target, const SamplingParams& params,
                        PhiloxStream* rng);

}  // namespace ladder
