// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/attention.h"

#include "kernels/attention.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "AttentionForward";
constexpr char kBwd[] = "AttentionBackward";

using Dims = AttentionDims;

// qkv [B,T,3C] f32 on the GPU, num_heads dividing C, sizes that fit an int
// (and, for kFlash, a head size the kernels hold in shared memory).
absl::Status CheckQkv(absl::string_view op, const Tensor& qkv, int num_heads, AttentionKind kind,
                      Dims* d) {
  RETURN_IF_ERROR(CheckAttentionQkv(Device::kCuda, op, qkv, num_heads, d));
  if (d->B * d->NH > INT_MAX || d->T > INT_MAX || 3 * d->C > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": qkv ", qkv.ShapeString(), " is too large for the kernels"));
  }
  if (kind == AttentionKind::kFlash && d->HS > kernels::kMaxFlashHeadSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": head size ", d->HS, " exceeds the flash kernels' ",
                     kernels::kMaxFlashHeadSize, " (use AttentionKind::kNaive)"));
  }
  return absl::OkStatus();
}

absl::Status CheckScratch(absl::string_view op, AttentionKind kind, const Tensor& scratch,
                          const Dims& d) {
  const int64_t need = AttentionScratchFloats(kind, d.B, d.T, d.NH);
  if (need == 0) return absl::OkStatus();
  return CheckNumel(op, "scratch", scratch, DType::kF32, need, /*at_least=*/true);
}

}  // namespace

absl::Status AttentionForward(Tensor out, Tensor lse, Tensor qkv, int num_heads, AttentionKind kind,
                              Tensor scratch, cudaStream_t stream) {
  Dims d;
  RETURN_IF_ERROR(CheckQkv(kFwd, qkv, num_heads, kind, &d));
  RETURN_IF_ERROR(CheckExact(kFwd, "out", out, DType::kF32, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(CheckExact(kFwd, "lse", lse, DType::kF32, {d.B, d.NH, d.T}));
  RETURN_IF_ERROR(CheckScratch(kFwd, kind, scratch, d));
  const int B = static_cast<int>(d.B), T = static_cast<int>(d.T), NH = static_cast<int>(d.NH),
            HS = static_cast<int>(d.HS);
  if (kind == AttentionKind::kNaive) {
    return CudaStatus(kernels::LaunchNaiveAttentionForward(out.f32(), lse.f32(), scratch.f32(),
                                                           qkv.f32(), B, T, NH, HS, stream),
                      kFwd);
  }
  return CudaStatus(
      kernels::LaunchFlashAttentionForward(out.f32(), lse.f32(), qkv.f32(), B, T, NH, HS, stream),
      kFwd);
}

absl::Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int num_heads, AttentionKind kind, Tensor scratch,
                               cudaStream_t stream) {
  Dims d;
  RETURN_IF_ERROR(CheckQkv(kBwd, qkv, num_heads, kind, &d));
  RETURN_IF_ERROR(CheckExact(kBwd, "dqkv", dqkv, DType::kF32, {d.B, d.T, 3 * d.C}));
  RETURN_IF_ERROR(CheckExact(kBwd, "dout", dout, DType::kF32, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(CheckExact(kBwd, "out", out, DType::kF32, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(CheckExact(kBwd, "lse", lse, DType::kF32, {d.B, d.NH, d.T}));
  RETURN_IF_ERROR(CheckScratch(kBwd, kind, scratch, d));
  const int B = static_cast<int>(d.B), T = static_cast<int>(d.T), NH = static_cast<int>(d.NH),
            HS = static_cast<int>(d.HS);
  if (kind == AttentionKind::kNaive) {
    return CudaStatus(
        kernels::LaunchNaiveAttentionBackward(dqkv.f32(), scratch.f32(), dout.f32(), qkv.f32(),
                                              out.f32(), lse.f32(), B, T, NH, HS, stream),
        kBwd);
  }
  return CudaStatus(
      kernels::LaunchFlashAttentionBackward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(),
                                            B, T, NH, HS, stream),
      kBwd);
}

LADDER_CUDA_END
