// Next-token sampling from logits: temperature, top-k, top-p (nucleus), or
// greedy. Each caller owns its RNG stream, so a request's tokens depend only
// on its own seed, never on what else runs beside it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "src/core/philox.h"

namespace ladder {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax)
  int top_k = 0;             // 0: no top-k cut
  double top_p = 1.0;        // 1: no nucleus cut

  absl::Status Validate() const;
};

// Draws one token id from `logits` (one per vocabulary entry). Greedy draws
// no random numbers; otherwise exactly one uniform from `rng`.
int32_t SampleToken(const std::vector<float>& logits, const SamplingParams& params,
                    PhiloxStream* rng);

}  // namespace ladder
