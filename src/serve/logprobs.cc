#include "src/serve/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ladder {

double LogSumExp(absl::Span<const float> logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(l - max);
  return max + std::log(sum);
}

double KlDivergence(absl::Span<const float> p_logits, absl::Span<const float> q_logits) {
  const double p_lse = LogSumExp(p_logits), q_lse = LogSumExp(q_logits);
  double kl = 0;
  for (size_t i = 0; i < p_logits.size(); ++i) {
    const double log_p = p_logits[i] - p_lse, log_q = q_logits[i] - q_lse;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return kl;
}

TokenLogprob ScoreToken(absl::Span<const float> logits, int32_t token, int top) {
  // log p(i) = l_i - log sum_j exp(l_j).
  const double lse = LogSumExp(logits);
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
