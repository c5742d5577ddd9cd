#include "src/serve/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ladder {

TokenLogprob ScoreToken(absl::Span<const float> logits, int32_t token, int top) {
  // log p(i) = l_i - (max + log sum_j exp(l_j - max)), shifted by the largest
  // logit so no exponential overflows.
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(l - max);
  const double lse = max + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(logits[token] - lse);
  const int k = std::min<int>(top, static_cast<int>(logits.size()));
  if (k > 0) {
    std::vector<int32_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int i = 0; i < k; ++i) {
      out.top.emplace_back(order[i], static_cast<float>(logits[order[i]] - lse));
    }
  }
  return out;
}

}  // namespace ladder
