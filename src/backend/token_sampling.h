// Next-token sampling, the one definition: what Backend::SampleTokens draws on
// every backend and what the serving sampler (src/serve/sampler.h) draws on
// the host. A row of logits becomes a distribution by temperature, top-k and
// top-p (nucleus), and one uniform in [0, 1) picks a token from it by
// walking the cumulative weights in id order. Greedy (temperature 0) is the
// argmax and uses no uniform.
//
// The functions here are the plain host reference (double precision, one
// pass after another); the CUDA kernel (kernels/sampling.cu) computes the
// same selection with block-wide reductions and picks the same token except
// where a sum's rounding puts the uniform, or the nucleus' edge, within a few
// ulp of a boundary between two tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace ladder {

// One token to draw: which row of the logits and from what distribution.
struct TokenSampleSpec {
  int64_t row = 0;         // the logits row
  double temperature = 0;  // 0: greedy (argmax)
  int top_k = 0;           // 0 (or >= the vocabulary): no top-k cut
  double top_p = 1.0;      // 1: no nucleus cut
  double uniform = 0;      // in [0, 1): the draw (unused when greedy)
};

// The argmax of logits, the lowest id among equal maxima.
int32_t ArgmaxToken(absl::Span<const float> logits);

// The distribution a non-greedy spec draws from, one weight per entry of
// logits, normalized to sum to 1: the softmax of logits / temperature (in
// double, shifted by the largest logit) over the candidates top-k and top-p
// keep, zero elsewhere. Candidates are ranked by logit, ties by id; the
// nucleus is the shortest prefix of the top-k (renormalized) whose
// probability reaches top_p. Greedy (temperature <= 0) puts all the mass on
// ArgmaxToken.
std::vector<double> TokenWeights(absl::Span<const float> logits, double temperature, int top_k,
                                 double top_p);

// The index drawn by `uniform` in [0, 1): the first i, in id order, whose
// cumulative weight exceeds uniform * sum(weights) (the last index with
// weight, should rounding leave none). The weights need not be normalized.
int32_t DrawToken(absl::Span<const double> weights, double uniform);

// SampleTokens' definition for one spec over one row of logits.
int32_t SampleTokenReference(absl::Span<const float> logits, const TokenSampleSpec& spec);

// InvalidArgument naming the first field of spec `index` out of range:
// temperature (>= 0, finite), top_k (>= 0), top_p ((0, 1]), uniform
// ([0, 1)), row ([0, rows)).
absl::Status CheckTokenSampleSpec(const TokenSampleSpec& spec, int64_t index, int64_t rows);
// CheckTokenSampleSpec of every spec, in order (the first error).
absl::Status CheckTokenSampleSpecs(absl::Span<const TokenSampleSpec> specs, int64_t rows);

}  // namespace ladder
