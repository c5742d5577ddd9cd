// CpuBackend::SampleTokens: the reference of token_sampling.h, one spec per
// OpenMP iteration (each spec reads only its own row).
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/backend/shape_check.h"
#include "src/backend/token_sampling.h"

namespace ladder {

absl::Status CpuBackend::SampleTokens(Tensor logits, int vocab_size,
                                      absl::Span<const TokenSampleSpec> specs,
                                      absl::Span<int32_t> ids) {
  int64_t N = 0, Vp = 0;
  RETURN_IF_ERROR(CheckSampleTokens(Device::kCpu, logits, vocab_size, specs, ids, &N, &Vp));
  const int64_t M = static_cast<int64_t>(specs.size());
#pragma omp parallel for schedule(dynamic, 1) if (M > 1)
  for (int64_t j = 0; j < M; ++j) {
    const absl::Span<const float> row(logits.f32() + specs[j].row * Vp, vocab_size);
    ids[j] = SampleTokenReference(row, specs[j]);
  }
  return absl::OkStatus();
}

}  // namespace ladder
