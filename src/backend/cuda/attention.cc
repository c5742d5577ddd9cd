// Validates shapes, dtypes and devices, then calls the kernel launchers with
// the element type of the call's storage dtype (cuda_check.h WithStorage).
#include "src/backend/cuda/attention.h"

#include <type_traits>

#include "kernels/attention.h"
#include "kernels/flash_attention_tc.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "AttentionForward";
constexpr char kBwd[] = "AttentionBackward";

using Dims = AttentionDims;

// qkv [B,T,3C], f32 or bf16, on the GPU, num_heads dividing C, sizes that
// fit an int (and, for kFlash, a head size the kernels hold in shared
// memory). qkv's dtype is the call's storage dtype.
absl::Status CheckQkv(absl::string_view op, const Tensor& qkv, int num_heads, AttentionKind kind,
                      Dims* d) {
  if (qkv.dtype != DType::kF32 && qkv.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": qkv is ", DTypeName(qkv.dtype), ", expected f32 or bf16"));
  }
  RETURN_IF_ERROR(CheckAttentionQkv(Device::kCuda, op, qkv, qkv.dtype, num_heads, d));
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

// An activation of the call (out, dout, dqkv): qkv's storage dtype and the
// exact shape dims.
absl::Status CheckActivation(absl::string_view op, absl::string_view what, const Tensor& t,
                             DType storage, std::initializer_list<int64_t> dims) {
  return CheckStorage(op, what, t, "qkv", storage, dims);
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
  RETURN_IF_ERROR(CheckActivation(kFwd, "out", out, qkv.dtype, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(CheckExact(kFwd, "lse", lse, DType::kF32, {d.B, d.NH, d.T}));
  RETURN_IF_ERROR(CheckScratch(kFwd, kind, scratch, d));
  const int B = static_cast<int>(d.B), T = static_cast<int>(d.T), NH = static_cast<int>(d.NH),
            HS = static_cast<int>(d.HS);
  return WithStorage(kFwd, "qkv", qkv.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if (kind == AttentionKind::kNaive) {
      return CudaStatus(
          kernels::LaunchNaiveAttentionForward<S>(Data<S>(out), lse.f32(), scratch.f32(),
                                                  Data<S>(qkv), B, T, NH, HS, stream),
          kFwd);
    }
    // bf16 with a head size of 64 or 128: the tensor-core kernel (P rounded
    // to bf16 before P V; kernels/flash_attention_tc.cu). Otherwise, and for
    // unaligned buffers, the scalar one.
    if constexpr (std::is_same_v<S, __nv_bfloat16>) {
      if (kernels::FlashAttentionTcApplies(out.data, qkv.data, HS)) {
        return CudaStatus(kernels::LaunchFlashAttentionForwardTc(
                              Data<S>(out), lse.f32(), Data<S>(qkv), B, T, NH, HS, stream),
                          kFwd);
      }
    }
    return CudaStatus(kernels::LaunchFlashAttentionForward<S>(Data<S>(out), lse.f32(), Data<S>(qkv),
                                                              B, T, NH, HS, stream),
                      kFwd);
  });
}

absl::Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               int num_heads, AttentionKind kind, Tensor scratch,
                               cudaStream_t stream) {
  Dims d;
  RETURN_IF_ERROR(CheckQkv(kBwd, qkv, num_heads, kind, &d));
  RETURN_IF_ERROR(CheckActivation(kBwd, "dqkv", dqkv, qkv.dtype, {d.B, d.T, 3 * d.C}));
  RETURN_IF_ERROR(CheckActivation(kBwd, "dout", dout, qkv.dtype, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(CheckActivation(kBwd, "out", out, qkv.dtype, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(CheckExact(kBwd, "lse", lse, DType::kF32, {d.B, d.NH, d.T}));
  RETURN_IF_ERROR(CheckScratch(kBwd, kind, scratch, d));
  const int B = static_cast<int>(d.B), T = static_cast<int>(d.T), NH = static_cast<int>(d.NH),
            HS = static_cast<int>(d.HS);
  return WithStorage(kBwd, "qkv", qkv.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if (kind == AttentionKind::kNaive) {
      return CudaStatus(kernels::LaunchNaiveAttentionBackward<S>(
                            Data<S>(dqkv), scratch.f32(), Data<S>(dout), Data<S>(qkv), Data<S>(out),
                            lse.f32(), B, T, NH, HS, stream),
                        kBwd);
    }
    if constexpr (std::is_same_v<S, __nv_bfloat16>) {
      // bf16 at head size 64 or 128: the tensor-core backward (P and dS
      // rounded to bf16 as mma operands; kernels/flash_attention_tc.cu).
      if (kernels::FlashAttentionTcBackwardApplies(dqkv.data, dout.data, qkv.data, out.data, HS)) {
        return CudaStatus(
            kernels::LaunchFlashAttentionBackwardTc(Data<S>(dqkv), Data<S>(dout), Data<S>(qkv),
                                                    Data<S>(out), lse.f32(), B, T, NH, HS, stream),
            kBwd);
      }
    }
    return CudaStatus(
        kernels::LaunchFlashAttentionBackward<S>(Data<S>(dqkv), Data<S>(dout), Data<S>(qkv),
                                                 Data<S>(out), lse.f32(), B, T, NH, HS, stream),
        kBwd);
  });
}

LADDER_CUDA_END
