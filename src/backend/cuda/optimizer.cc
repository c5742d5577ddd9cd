// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/optimizer.h"

#include <cmath>
#include <cstdint>

#include "kernels/optimizer.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kSum[] = "SumOfSquares";
constexpr char kAdamW[] = "AdamWUpdate";
constexpr char kRound[] = "RoundToBf16";

bool Aligned8(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

}  // namespace

int64_t SumOfSquaresScratchFloats(int64_t n) {
  return 2 * static_cast<int64_t>(kernels::SumOfSquaresScratchDoubles(n));
}

absl::Status SumOfSquares(Tensor out, Tensor x, Tensor scratch, cudaStream_t stream) {
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(RowView(kSum, "x", x, DType::kF32, &rows, &cols));
  RETURN_IF_ERROR(CheckNumel(kSum, "out", out, DType::kF32, 1));
  const int64_t n = rows * cols;
  RETURN_IF_ERROR(
      CheckNumel(kSum, "scratch", scratch, DType::kF32, SumOfSquaresScratchFloats(n), true));
  if (!Aligned8(scratch.data)) {
    return absl::InvalidArgumentError(absl::StrCat(kSum, ": scratch is not 8-byte aligned"));
  }
  return CudaStatus(kernels::LaunchSumOfSquares(out.f32(), x.f32(), n,
                                                static_cast<double*>(scratch.data), stream),
                    kSum);
}

int64_t AdamWDescriptorBytes(int count) {
  return count <= 0 ? 0 : static_cast<int64_t>(sizeof(kernels::AdamWTensor)) * count;
}

absl::Status AdamWUpdate(const std::vector<AdamWTensor>& slots, const AdamWParams& p,
                         Tensor descriptors, cudaStream_t stream) {
  if (p.step < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kAdamW, ": step ", p.step, " must be >= 1"));
  }
  if (slots.size() > static_cast<size_t>(INT_MAX / sizeof(kernels::AdamWTensor))) {
    return absl::InvalidArgumentError(absl::StrCat(kAdamW, ": too many tensors"));
  }
  const int count = static_cast<int>(slots.size());
  if (count == 0) return absl::OkStatus();
  std::vector<kernels::AdamWTensor> host(slots.size());
  for (int i = 0; i < count; ++i) {
    const AdamWTensor& s = slots[static_cast<size_t>(i)];
    int64_t n = 0;
    RETURN_IF_ERROR(CheckAdamWTensor(Device::kCuda, kAdamW, static_cast<size_t>(i), s, &n));
    host[static_cast<size_t>(i)] = {s.param.f32(),
                                    s.grad.f32(),
                                    s.m.f32(),
                                    s.v.f32(),
                                    n,
                                    s.weight_decay,
                                    0,
                                    s.param16.empty() ? nullptr : Data<__nv_bfloat16>(s.param16),
                                    s.round_offset};
  }
  const int64_t bytes = AdamWDescriptorBytes(count);
  if (descriptors.empty() || !DimsValid(descriptors) ||
      static_cast<int64_t>(descriptors.bytes()) < bytes || !Aligned8(descriptors.data)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kAdamW, ": descriptors has shape ", descriptors.ShapeString(),
                     ", expected at least ", bytes, " bytes, 8-byte aligned"));
  }
  RETURN_IF_ERROR(CheckOnGpu(kAdamW, "descriptors", descriptors));
  const int64_t total_chunks = kernels::PlanAdamWChunks(host.data(), count);

  kernels::AdamWStep step;
  step.scalars = MakeAdamWScalars(p.lr, p.beta1, p.beta2, p.eps, p.grad_scale, p.step);
  step.round_seed = p.round_seed;
  step.round_step = static_cast<uint64_t>(p.step);

  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(descriptors.data, host.data(), static_cast<size_t>(bytes),
                                 cudaMemcpyHostToDevice, stream),
                 kAdamW));
  return CudaStatus(kernels::LaunchAdamW(static_cast<const kernels::AdamWTensor*>(descriptors.data),
                                         count, total_chunks, step, stream),
                    kAdamW);
}

absl::Status RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr,
                         cudaStream_t stream) {
  RETURN_IF_ERROR(CheckRoundToBf16(Device::kCuda, kRound, dst, src));
  const StochasticRounding r = sr != nullptr ? *sr : StochasticRounding{};
  return CudaStatus(kernels::LaunchRoundToBf16(Data<__nv_bfloat16>(dst), src.f32(), src.numel(),
                                               sr != nullptr, r.seed, r.step, r.offset, stream),
                    kRound);
}

LADDER_CUDA_END
