// Next-token sampling from logits: temperature, top-k, top-p (nucleus), or
// greedy, and the acceptance rule of speculative decoding built on the same
// distributions. Each caller owns its RNG stream, so a request's tokens
// depend only on its own seed, never on what else runs beside it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "src/core/philox.h"

namespace ladder {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax)
  int top_k = 0;             // 0: no top-k cut
  double top_p = 1.0;        // 1: no nucleus cut

  absl::Status Validate() const;
};

// The distribution SampleToken draws from, one probability per vocabulary
// entry: the softmax of logits / temperature over the candidates top-k and
// top-p keep (zero elsewhere), renormalized to sum to 1. Greedy puts all the
// mass on the argmax (the lowest id among equal logits).
std::vector<double> TokenDistribution(absl::Span<const float> logits, const SamplingParams& params);

// Draws index i with probability weights[i] / sum(weights) (the weights need
// not be normalized), with exactly one uniform from `rng`.
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
