// Validates shapes, dtypes, devices and aliasing, then calls the kernel
// launchers with the element type of the call's storage dtype (cuda_check.h
// WithStorage).
#include "src/backend/cuda/attention_part.h"

#include <climits>

#include "kernels/attention.h"
#include "kernels/attention_part.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "AttentionPartForward";
constexpr char kBwd[] = "AttentionPartBackward";

using Dims = AttentionPartDims;

// q_qkv f32 or bf16 (the call's storage dtype), kv_qkv of the same dtype,
// both [B,T,3C] on the GPU with one B and C, num_heads dividing C, i32
// positions of Tq and Tk, sizes that fit an int and a head size the kernels
// hold in shared memory.
absl::Status CheckInputs(absl::string_view op, const Tensor& q_qkv, const Tensor& kv_qkv,
                         const Tensor& q_pos, const Tensor& k_pos, int num_heads, Dims* d) {
  if (q_qkv.dtype != DType::kF32 && q_qkv.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": q_qkv is ", DTypeName(q_qkv.dtype), ", expected f32 or bf16"));
  }
  if (!kv_qkv.empty() && kv_qkv.dtype != q_qkv.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kv_qkv is ", DTypeName(kv_qkv.dtype),
                                                   " but q_qkv is ", DTypeName(q_qkv.dtype),
                                                   " (one storage dtype per call)"));
  }
  RETURN_IF_ERROR(CheckAttentionPart(Device::kCuda, op, q_qkv, kv_qkv, q_pos, k_pos, q_qkv.dtype,
                                     num_heads, d));
  if (d->B * d->NH > INT_MAX || d->Tq > INT_MAX || d->Tk > INT_MAX || 3 * d->C > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": q_qkv ", q_qkv.ShapeString(),
                                                   " or kv_qkv ", kv_qkv.ShapeString(),
                                                   " is too large for the kernels"));
  }
  if (d->HS > kernels::kMaxFlashHeadSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": head size ", d->HS, " exceeds the kernels' ", kernels::kMaxFlashHeadSize));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AttentionPartForward(Tensor out, Tensor lse, Tensor q_qkv, Tensor kv_qkv, Tensor q_pos,
                                  Tensor k_pos, int num_heads, bool merge, cudaStream_t stream) {
  Dims d;
  RETURN_IF_ERROR(CheckInputs(kFwd, q_qkv, kv_qkv, q_pos, k_pos, num_heads, &d));
  RETURN_IF_ERROR(CheckStorage(kFwd, "out", out, "q_qkv", q_qkv.dtype, {d.B, d.Tq, d.C}));
  RETURN_IF_ERROR(CheckExact(kFwd, "lse", lse, DType::kF32, {d.B, d.NH, d.Tq}));
  RETURN_IF_ERROR(CheckAttentionPartAliasing(kFwd, out, q_qkv, kv_qkv, Tensor(), Tensor()));
  const int B = static_cast<int>(d.B), Tq = static_cast<int>(d.Tq), Tk = static_cast<int>(d.Tk),
            NH = static_cast<int>(d.NH), HS = static_cast<int>(d.HS);
  return WithStorage(kFwd, "q_qkv", q_qkv.dtype, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return CudaStatus(kernels::LaunchAttentionPartForward<S>(
                          Data<S>(out), lse.f32(), Data<S>(q_qkv), Data<S>(kv_qkv), q_pos.i32(),
                          k_pos.i32(), B, Tq, Tk, NH, HS, merge, stream),
                      kFwd);
  });
}

absl::Status AttentionPartBackward(Tensor dq_qkv, Tensor dkv_qkv, Tensor dout, Tensor q_qkv,
                                   Tensor kv_qkv, Tensor out, Tensor lse, Tensor q_pos,
                                   Tensor k_pos, int num_heads, cudaStream_t stream) {
  Dims d;
  RETURN_IF_ERROR(CheckInputs(kBwd, q_qkv, kv_qkv, q_pos, k_pos, num_heads, &d));
  const DType st = q_qkv.dtype;
  RETURN_IF_ERROR(CheckStorage(kBwd, "dq_qkv", dq_qkv, "q_qkv", st, {d.B, d.Tq, 3 * d.C}));
  RETURN_IF_ERROR(CheckStorage(kBwd, "dkv_qkv", dkv_qkv, "q_qkv", st, {d.B, d.Tk, 3 * d.C}));
  RETURN_IF_ERROR(CheckStorage(kBwd, "dout", dout, "q_qkv", st, {d.B, d.Tq, d.C}));
  RETURN_IF_ERROR(CheckStorage(kBwd, "out", out, "q_qkv", st, {d.B, d.Tq, d.C}));
  RETURN_IF_ERROR(CheckExact(kBwd, "lse", lse, DType::kF32, {d.B, d.NH, d.Tq}));
  RETURN_IF_ERROR(CheckAttentionPartAliasing(kBwd, Tensor(), q_qkv, kv_qkv, dq_qkv, dkv_qkv));
  const int B = static_cast<int>(d.B), Tq = static_cast<int>(d.Tq), Tk = static_cast<int>(d.Tk),
            NH = static_cast<int>(d.NH), HS = static_cast<int>(d.HS);
  return WithStorage(kBwd, "q_qkv", st, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchAttentionPartBackward<S>(
            Data<S>(dq_qkv), Data<S>(dkv_qkv), Data<S>(dout), Data<S>(q_qkv), Data<S>(kv_qkv),
            Data<S>(out), lse.f32(), q_pos.i32(), k_pos.i32(), B, Tq, Tk, NH, HS, stream),
        kBwd);
  });
}

LADDER_CUDA_END
