#include "src/backend/cuda/sampling.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/sampling.h"
#include "src/backend/cuda/cuda_check.h"
#include "src/backend/shape_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kOp[] = "SampleTokens";

}  // namespace

int64_t SampleTokensScratchBytes(int64_t specs) {
  return specs * static_cast<int64_t>(sizeof(kernels::SampleRow) + sizeof(int32_t));
}

absl::Status SampleTokens(Tensor logits, int vocab_size, absl::Span<const TokenSampleSpec> specs,
                          absl::Span<int32_t> ids, Tensor scratch, cudaStream_t stream) {
  int64_t N = 0, Vp = 0;
  RETURN_IF_ERROR(CheckSampleTokens(Device::kCuda, logits, vocab_size, specs, ids, &N, &Vp));
  const int64_t M = static_cast<int64_t>(specs.size());
  if (M == 0) return absl::OkStatus();
  if (M > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": ", M, " specs are too many"));
  }
  const int64_t bytes = SampleTokensScratchBytes(M);
  if (scratch.empty() || static_cast<int64_t>(scratch.bytes()) < bytes ||
      reinterpret_cast<uintptr_t>(scratch.data) % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": scratch has ", scratch.bytes(),
                                                   " bytes, expected at least ", bytes,
                                                   ", 8-byte aligned"));
  }
  RETURN_IF_ERROR(CheckOnGpu(kOp, "scratch", scratch));
  std::vector<kernels::SampleRow> rows(static_cast<size_t>(M));
  for (int64_t j = 0; j < M; ++j) {
    const TokenSampleSpec& s = specs[j];
    rows[j] = kernels::SampleRow{s.temperature, s.top_p, s.uniform, s.row, s.top_k, 0};
  }
  auto* d_rows = static_cast<kernels::SampleRow*>(scratch.data);
  auto* d_ids = reinterpret_cast<int32_t*>(d_rows + M);
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(d_rows, rows.data(), rows.size() * sizeof(rows[0]),
                                             cudaMemcpyHostToDevice, stream),
                             kOp));
  RETURN_IF_ERROR(CudaStatus(kernels::LaunchSampleTokens(d_ids, logits.f32(), Vp, vocab_size,
                                                         d_rows, static_cast<int>(M), stream),
                             kOp));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(ids.data(), d_ids, ids.size() * sizeof(int32_t),
                                             cudaMemcpyDeviceToHost, stream),
                             kOp));
  return CudaStatus(cudaStreamSynchronize(stream), kOp);
}

LADDER_CUDA_END
