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
  // (Comparisons written so that NaN fails them.)
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty must be in [-2, 2], got ", presence_penalty));
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty must be in [-2, 2], got ", frequency_penalty));
  }
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be > 0, got ", repetition_penalty));
  }
  for (const auto& [token, bias] : logit_bias) {
    if (!(bias >= -100 && bias <= 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias of token ", token, " must be in [-100, 100], got ", bias));
    }
  }
  return absl::OkStatus();
}

bool SamplingParams::AdjustsLogits() const {
  return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1 ||
         !logit_bias.empty();
}

TokenHistory::TokenHistory(absl::Span<const int32_t> prompt) : seen_(prompt.begin(), prompt.end()) {}

void TokenHistory::Add(int32_t token) {
  ++generated_[token];
  seen_.insert(token);
}

void AdjustLogits(const SamplingParams& params, const TokenHistory& history,
                  absl::Span<float> logits) {
  // Every token is adjusted independently, so the containers' iteration
  // order does not matter.
  if (params.repetition_penalty != 1) {
    const double r = params.repetition_penalty;
    for (int32_t t : history.seen()) {
      const double l = logits[t];
      logits[t] = static_cast<float>(l > 0 ? l / r : l * r);
    }
  }
  if (params.presence_penalty != 0 || params.frequency_penalty != 0) {
    for (const auto& [t, count] : history.generated()) {
      logits[t] = static_cast<float>(logits[t] - count * params.frequency_penalty -
                                     params.presence_penalty);
    }
  }
  for (const auto& [t, bias] : params.logit_bias) {
    logits[t] = static_cast<float>(logits[t] + bias);
  }
}

std::vector<double> TokenDistribution(absl::Span<const float> logits,
                                      const SamplingParams& params) {
  return TokenWeights(logits, params.temperature, params.top_k, params.top_p);
}

int32_t SampleFrom(absl::Span<const double> weights, PhiloxStream* rng) {
  return DrawToken(weights, rng->NextUniform());
}

int32_t SampleToken(absl::Span<const float> logits, const SamplingParams& params,
                    PhiloxStream* rng) {
  if (params.temperature <= 0) return ArgmaxToken(logits);
  return SampleFrom(TokenDistribution(logits, params), rng);
}

Verdict VerifyProposals(absl::Span<const int32_t> proposals,
                        const std::vector<std::vector<double>>& draft,
                        absl::Span<const float> target, const SamplingParams& params,
                        PhiloxStream* rng) {
  const size_t K = proposals.size();
  const size_t V = target.size() / (K + 1);
  Verdict v;
  for (size_t j = 0; j < K; ++j) {
    const std::vector<double> p = TokenDistribution(target.subspan(j * V, V), params);
    const std::vector<double>& q = draft[j];
    const int32_t x = proposals[j];
    // A uniform is drawn only when the outcome is uncertain, so greedy
    // verification draws none.
    const bool accept =
        p[x] >= q[x] || (p[x] > 0 && static_cast<double>(rng->NextUniform()) * q[x] < p[x]);
    if (!accept) {
      std::vector<double> residual(V);
      for (size_t i = 0; i < V; ++i) residual[i] = std::max(0.0, p[i] - q[i]);
      v.next = SampleFrom(residual, rng);
      return v;
    }
    ++v.accepted;
  }
  v.next = SampleToken(target.subspan(K * V, V), params, rng);
  return v;
}

}  // namespace ladder
