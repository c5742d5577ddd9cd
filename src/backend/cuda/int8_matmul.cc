// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/int8_matmul.h"

#include <cstdint>

#include "kernels/int8_matmul.h"
#include "src/backend/cuda/cuda_check.h"
#include "src/backend/quantize.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "MatmulInt8Forward";
constexpr char kRows[] = "DequantizeRows";
constexpr int64_t kBlock = 32;  // activation block, and the unit of the group size

// q [OC, C] i8 (OC a multiple of 16, 4-byte aligned) and scales [OC, C / G]
// f32 with G a multiple of 32 dividing C (as the CPU backend's CheckQuantized).
absl::Status CheckQuantized(absl::string_view op, const Tensor& q, const Tensor& scales,
                            int64_t* OC, int64_t* C, int64_t* G) {
  RETURN_IF_ERROR(RowView(op, "q", q, DType::kI8, OC, C));
  if (q.rank != 2 || *OC % kInt8PanelRows != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": q ", q.ShapeString(), " is not a matrix of panels of ", kInt8PanelRows, " rows"));
  }
  if (reinterpret_cast<uintptr_t>(q.data) % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": q is not 4-byte aligned"));
  }
  int64_t rows = 0, groups = 0;
  RETURN_IF_ERROR(RowView(op, "scales", scales, DType::kF32, &rows, &groups));
  if (rows != *OC || groups <= 0 || *C % groups != 0 || (*C / groups) % kBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": scales ", scales.ShapeString(), " do not split q ", q.ShapeString(),
                     " into groups of a multiple of 32 input channels"));
  }
  *G = *C / groups;
  return absl::OkStatus();
}

}  // namespace

absl::Status MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales, Tensor bias,
                               cudaStream_t stream) {
  int64_t OC = 0, C = 0, G = 0, N = 0, Cin = 0;
  RETURN_IF_ERROR(CheckQuantized(kFwd, q, scales, &OC, &C, &G));
  // The activations' dtype picks the layer: f32 is W8A8, bf16 is W8A16.
  const DType act = inp.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
  RETURN_IF_ERROR(RowView(kFwd, "inp", inp, act, &N, &Cin));
  if (Cin != C) {
    return absl::InvalidArgumentError(absl::StrCat(kFwd, ": inp has ", Cin, " columns, q has ", C));
  }
  // W8A16 writes bf16, or f32 (logits); W8A8 f32.
  const DType out_dtype = act == DType::kBF16 && out.dtype == DType::kF32 ? DType::kF32 : act;
  RETURN_IF_ERROR(CheckRows(kFwd, "out", out, out_dtype, N, OC));
  if (!bias.empty()) RETURN_IF_ERROR(CheckNumel(kFwd, "bias", bias, DType::kF32, OC));
  if (act == DType::kBF16) {
    if (reinterpret_cast<uintptr_t>(q.data) % 8 != 0 ||
        reinterpret_cast<uintptr_t>(inp.data) % 8 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFwd, ": W8A16 needs q and inp 8-byte aligned"));
    }
    return WithStorage(kFwd, "out", out_dtype, [&](auto tag) {
      using O = typename decltype(tag)::type;
      return CudaStatus(kernels::LaunchMatmulInt8ForwardBf16<O>(
                            Data<O>(out), Data<__nv_bfloat16>(inp), q.i8(), scales.f32(),
                            bias.empty() ? nullptr : bias.f32(), static_cast<int>(N),
                            static_cast<int>(C), static_cast<int>(OC), static_cast<int>(G), stream),
                        kFwd);
    });
  }
  return CudaStatus(kernels::LaunchMatmulInt8Forward(
                        out.f32(), inp.f32(), q.i8(), scales.f32(),
                        bias.empty() ? nullptr : bias.f32(), static_cast<int>(N),
                        static_cast<int>(C), static_cast<int>(OC), static_cast<int>(G), stream),
                    kFwd);
}

absl::Status DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows, cudaStream_t stream) {
  int64_t OC = 0, C = 0, G = 0, N = 0, Cout = 0;
  RETURN_IF_ERROR(CheckQuantized(kRows, q, scales, &OC, &C, &G));
  RETURN_IF_ERROR(RowView(kRows, "out", out, DType::kF32, &N, &Cout));
  if (Cout != C) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRows, ": out has ", Cout, " columns, q has ", C));
  }
  RETURN_IF_ERROR(CheckNumel(kRows, "rows", rows, DType::kI32, N));
  return CudaStatus(kernels::LaunchDequantizeRows(
                        out.f32(), q.i8(), scales.f32(), rows.i32(), static_cast<int>(N),
                        static_cast<int>(C), static_cast<int>(OC), static_cast<int>(G), stream),
                    kRows);
}

LADDER_CUDA_END
