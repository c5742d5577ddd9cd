#include "src/backend/token_sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace ladder {

int32_t ArgmaxToken(absl::Span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<double> TokenWeights(absl::Span<const float> logits, double temperature, int top_k,
                                 double top_p) {
  const int V = static_cast<int>(logits.size());
  std::vector<double> p(V, 0.0);
  if (temperature <= 0) {
    p[ArgmaxToken(logits)] = 1.0;
    return p;
  }
  // Softmax at the temperature, in double, shifted by the largest logit.
  const double top = logits[ArgmaxToken(logits)];
  for (int i = 0; i < V; ++i) p[i] = std::exp((logits[i] - top) / temperature);
  const int k = (top_k > 0 && top_k < V) ? top_k : V;
  if (k < V || top_p < 1.0) {
    // Candidates by logit (ties by id, so the cut is deterministic). Without
    // a cut nothing is sorted: a 50k-entry sort per token is not free.
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    // Nucleus, over the top-k renormalized: the smallest prefix whose
    // probability reaches top_p.
    int keep = k;
    if (top_p < 1.0) {
      double kept_sum = 0.0;
      for (int i = 0; i < k; ++i) kept_sum += p[order[i]];
      double cum = 0.0;
      for (int i = 0; i < k; ++i) {
        cum += p[order[i]] / kept_sum;
        if (cum >= top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    for (int i = keep; i < V; ++i) p[order[i]] = 0.0;
  }
  const double sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= sum;
  return p;
}

int32_t DrawToken(absl::Span<const double> weights, double uniform) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const double u = uniform * total;
  double cum = 0.0;
  int32_t last = 0;  // the last index with weight, should rounding leave u >= cum
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    cum += weights[i];
    last = static_cast<int32_t>(i);
    if (u < cum) return last;
  }
  return last;
}

int32_t SampleTokenReference(absl::Span<const float> logits, const TokenSampleSpec& spec) {
  if (spec.temperature <= 0) return ArgmaxToken(logits);
  return DrawToken(TokenWeights(logits, spec.temperature, spec.top_k, spec.top_p), spec.uniform);
}

absl::Status CheckTokenSampleSpec(const TokenSampleSpec& spec, int64_t index, int64_t rows) {
  // (Comparisons written so that NaN fails them.)
  const char* bad = nullptr;
  if (!(spec.temperature >= 0) || !std::isfinite(spec.temperature)) {
    bad = "temperature must be >= 0";
  } else if (spec.top_k < 0) {
    bad = "top_k must be >= 0";
  } else if (!(spec.top_p > 0 && spec.top_p <= 1)) {
    bad = "top_p must be in (0, 1]";
  } else if (!(spec.uniform >= 0 && spec.uniform < 1)) {
    bad = "uniform must be in [0, 1)";
  } else if (spec.row < 0 || spec.row >= rows) {
    return absl::InvalidArgumentError(absl::StrCat("sample ", index, ": row ", spec.row,
                                                   " is outside the logits' ", rows, " rows"));
  }
  if (bad == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("sample ", index, ": ", bad, " (temperature ", spec.temperature, ", top_k ",
                   spec.top_k, ", top_p ", spec.top_p, ", uniform ", spec.uniform, ")"));
}

absl::Status CheckTokenSampleSpecs(absl::Span<const TokenSampleSpec> specs, int64_t rows) {
  for (size_t j = 0; j < specs.size(); ++j) {
    const absl::Status s = CheckTokenSampleSpec(specs[j], static_cast<int64_t>(j), rows);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ladder
