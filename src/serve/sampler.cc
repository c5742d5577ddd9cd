#include "src/serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace ladder {

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature must be >= 0, got ", temperature));
  }
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", top_k));
  if (!(top_p > 0 && top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p must be in (0, 1], got ", top_p));
  }
  return absl::OkStatus();
}

int32_t SampleToken(const std::vector<float>& logits, const SamplingParams& params,
                    PhiloxStream* rng) {
  const int V = static_cast<int>(logits.size());
  if (params.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit (ties by id, so the order is deterministic).
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  const int k = (params.top_k > 0 && params.top_k < V) ? params.top_k : V;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  order.resize(k);
  // Softmax at the temperature over the kept candidates, in double.
  std::vector<double> p(k);
  const double top = logits[order[0]];
  double sum = 0.0;
  for (int i = 0; i < k; ++i) {
    p[i] = std::exp((logits[order[i]] - top) / params.temperature);
    sum += p[i];
  }
  // Nucleus: the smallest prefix whose probability reaches top_p.
  int keep = k;
  if (params.top_p < 1.0) {
    double cum = 0.0;
    for (int i = 0; i < k; ++i) {
      cum += p[i] / sum;
      if (cum >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  const double kept_sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  const double u = rng->NextUniform() * kept_sum;
  double cum = 0.0;
  for (int i = 0; i < keep; ++i) {
    cum += p[i];
    if (u < cum) return order[i];
  }
  return order[keep - 1];
}

}  // namespace ladder
