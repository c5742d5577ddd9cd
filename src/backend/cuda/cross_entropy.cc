// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/cross_entropy.h"

#include "kernels/cross_entropy.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kMax[] = "CrossEntropyRowMax";
constexpr char kPartials[] = "CrossEntropyPartials";
constexpr char kLoss[] = "CrossEntropyLoss";
constexpr char kBwd[] = "CrossEntropyBackward";
constexpr char kFused[] = "CrossEntropyFused";

// CheckVocabShard (src/backend/shape_check.h) for logits stored in either
// dtype (f32 or bf16, else InvalidArgument).
absl::Status CheckShard(absl::string_view op, const Tensor& logits, int64_t vocab_start,
                        int vocab_size, int64_t* N, int64_t* Vs) {
  if (logits.dtype != DType::kF32 && logits.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": logits must be f32 or bf16"));
  }
  return CheckVocabShard(Device::kCuda, op, logits, logits.dtype, vocab_start, vocab_size, N, Vs);
}

}  // namespace

absl::Status CrossEntropyRowMax(Tensor row_max, Tensor logits, int64_t vocab_start, int vocab_size,
                                cudaStream_t stream) {
  int64_t N = 0, Vs = 0;
  RETURN_IF_ERROR(CheckShard(kMax, logits, vocab_start, vocab_size, &N, &Vs));
  RETURN_IF_ERROR(CheckNumel(kMax, "row_max", row_max, DType::kF32, N));
  return WithStorage(kMax, "logits", logits.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchCrossEntropyRowMax<T>(row_max.f32(), Data<T>(logits), static_cast<int>(N),
                                             static_cast<int>(Vs), vocab_start, vocab_size, stream),
        kMax);
  });
}

absl::Status CrossEntropyPartials(Tensor sum_exp, Tensor target_logit, Tensor logits,
                                  Tensor targets, Tensor row_max, int64_t vocab_start,
                                  int vocab_size, cudaStream_t stream) {
  int64_t N = 0, Vs = 0;
  RETURN_IF_ERROR(CheckShard(kPartials, logits, vocab_start, vocab_size, &N, &Vs));
  RETURN_IF_ERROR(CheckNumel(kPartials, "targets", targets, DType::kI32, N));
  RETURN_IF_ERROR(CheckNumel(kPartials, "row_max", row_max, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kPartials, "sum_exp", sum_exp, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kPartials, "target_logit", target_logit, DType::kF32, N));
  return WithStorage(kPartials, "logits", logits.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchCrossEntropyPartials<T>(
            sum_exp.f32(), target_logit.f32(), Data<T>(logits), targets.i32(), row_max.f32(),
            static_cast<int>(N), static_cast<int>(Vs), vocab_start, vocab_size, stream),
        kPartials);
  });
}

absl::Status CrossEntropyLoss(Tensor losses, Tensor lse, Tensor row_max, Tensor sum_exp,
                              Tensor target_logit, cudaStream_t stream) {
  // Every tensor holds N = losses.numel() elements (any shape: [N] or [B,T]).
  if (losses.empty() || !DimsValid(losses) || losses.numel() > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(kLoss, ": losses has shape ", losses.ShapeString()));
  }
  const int64_t N = losses.numel();
  RETURN_IF_ERROR(CheckNumel(kLoss, "losses", losses, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kLoss, "lse", lse, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kLoss, "row_max", row_max, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kLoss, "sum_exp", sum_exp, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kLoss, "target_logit", target_logit, DType::kF32, N));
  return CudaStatus(
      kernels::LaunchCrossEntropyLoss(losses.f32(), lse.f32(), row_max.f32(), sum_exp.f32(),
                                      target_logit.f32(), static_cast<int>(N), stream),
      kLoss);
}

absl::Status CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets, Tensor lse,
                                  int64_t vocab_start, int vocab_size, float dloss,
                                  cudaStream_t stream) {
  int64_t N = 0, Vs = 0;
  RETURN_IF_ERROR(CheckShard(kBwd, logits, vocab_start, vocab_size, &N, &Vs));
  RETURN_IF_ERROR(CheckNumel(kBwd, "targets", targets, DType::kI32, N));
  RETURN_IF_ERROR(CheckNumel(kBwd, "lse", lse, DType::kF32, N));
  // dlogits is stored like the logits (a mixed call is InvalidArgument).
  RETURN_IF_ERROR(CheckRows(kBwd, "dlogits", dlogits, logits.dtype, N, Vs));
  return WithStorage(kBwd, "logits", logits.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchCrossEntropyBackward<T>(Data<T>(dlogits), Data<T>(logits), targets.i32(),
                                               lse.f32(), static_cast<int>(N), static_cast<int>(Vs),
                                               vocab_start, vocab_size, dloss, stream),
        kBwd);
  });
}

absl::Status CrossEntropyFused(Tensor losses, Tensor lse, Tensor logits, Tensor targets,
                               int vocab_size, float dloss, cudaStream_t stream) {
  int64_t N = 0, Vs = 0;
  RETURN_IF_ERROR(CheckShard(kFused, logits, 0, vocab_size, &N, &Vs));
  if (vocab_size > Vs) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFused, ": vocab_size ", vocab_size, " exceeds the rows' ", Vs, " columns"));
  }
  RETURN_IF_ERROR(CheckNumel(kFused, "targets", targets, DType::kI32, N));
  RETURN_IF_ERROR(CheckNumel(kFused, "losses", losses, DType::kF32, N));
  RETURN_IF_ERROR(CheckNumel(kFused, "lse", lse, DType::kF32, N));
  return WithStorage(kFused, "logits", logits.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(kernels::LaunchCrossEntropyFused<T>(
                          losses.f32(), lse.f32(), Data<T>(logits), targets.i32(),
                          static_cast<int>(N), static_cast<int>(Vs), vocab_size, dloss, stream),
                      kFused);
  });
}

LADDER_CUDA_END
