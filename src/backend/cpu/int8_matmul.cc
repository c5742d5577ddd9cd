// int8-weight linear layer for decoding: out [N,OC] = inp [N,C] @ dequant(W)^T
// + bias, with W stored as int8 in groups of G input channels, one f32 scale
// per group (backend.h "int8 weights", quantize.h for the format).
//
// Why: decoding one token reads every weight once and does two FLOPs per
// weight, so batch-1 decode is bound by memory bandwidth, not by FLOPs. int8
// weights move a quarter of fp32's bytes; the activations stay f32 (W8A32),
// so the only error is the weights' rounding. Per group the dot product is
//   sum_c x[c] * q[o,c] * s[o,g] = s[o,g] * sum_{c in g} x[c] * q[o,c],
// one multiply by the scale per group of 32 or more values.
//
// This file is the reference: plain loops, parallel over output channels.
// A token tile of several rows shares each weight row while it is in cache,
// so prefill reads the weights once per tile rather than once per token.
#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "MatmulInt8Forward";
constexpr char kRows[] = "DequantizeRows";

// q [OC, C] i8 and scales [OC, C / G] f32 with G a multiple of 32 dividing C.
absl::Status CheckQuantized(absl::string_view op, const Tensor& q, const Tensor& scales,
                            int64_t* OC, int64_t* C, int64_t* G) {
  RETURN_IF_ERROR(cpu::RowView(op, "q", q, DType::kI8, OC, C));
  int64_t rows = 0, groups = 0;
  RETURN_IF_ERROR(cpu::RowView(op, "scales", scales, DType::kF32, &rows, &groups));
  if (q.rank != 2 || rows != *OC || groups <= 0 || *C % groups != 0 || (*C / groups) % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": scales ", scales.ShapeString(), " do not split q ", q.ShapeString(),
                     " into groups of a multiple of 32 input channels"));
  }
  *G = *C / groups;
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuBackend::MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales,
                                           Tensor bias) {
  int64_t OC = 0, C = 0, G = 0, N = 0, Cin = 0;
  RETURN_IF_ERROR(CheckQuantized(kFwd, q, scales, &OC, &C, &G));
  RETURN_IF_ERROR(cpu::RowView(kFwd, "inp", inp, DType::kF32, &N, &Cin));
  if (Cin != C) {
    return absl::InvalidArgumentError(absl::StrCat(kFwd, ": inp has ", Cin, " columns, q has ", C));
  }
  RETURN_IF_ERROR(cpu::CheckRows(kFwd, "out", out, DType::kF32, N, OC));
  if (!bias.empty()) RETURN_IF_ERROR(cpu::CheckNumel(kFwd, "bias", bias, DType::kF32, OC));
  const int8_t* Q = q.i8();
  const float* S = scales.f32();
  const float* X = inp.f32();
  float* Y = out.f32();
  const float* B = bias.empty() ? nullptr : bias.f32();
  const int64_t groups = C / G;
#pragma omp parallel for schedule(static) if (N * OC * C >= cpu::kParallelMin)
  for (int64_t o = 0; o < OC; ++o) {
    const int8_t* w = Q + o * C;
    const float* s = S + o * groups;
    for (int64_t n = 0; n < N; ++n) {
      const float* x = X + n * C;
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        float dot = 0.0f;
        for (int64_t c = g * G; c < (g + 1) * G; ++c) dot += x[c] * static_cast<float>(w[c]);
        acc += s[g] * dot;
      }
      Y[n * OC + o] = acc + (B ? B[o] : 0.0f);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows) {
  int64_t OC = 0, C = 0, G = 0, N = 0, Cout = 0;
  RETURN_IF_ERROR(CheckQuantized(kRows, q, scales, &OC, &C, &G));
  RETURN_IF_ERROR(cpu::RowView(kRows, "out", out, DType::kF32, &N, &Cout));
  if (Cout != C) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRows, ": out has ", Cout, " columns, q has ", C));
  }
  RETURN_IF_ERROR(cpu::CheckNumel(kRows, "rows", rows, DType::kI32, N));
  for (int64_t n = 0; n < N; ++n) {
    const int32_t r = rows.i32()[n];
    if (r < 0 || r >= OC) {
      return absl::InvalidArgumentError(
          absl::StrCat(kRows, ": row ", r, " of entry ", n, " outside [0, ", OC, ")"));
    }
    const int8_t* w = q.i8() + r * C;
    const float* s = scales.f32() + r * (C / G);
    float* y = out.f32() + n * C;
    for (int64_t c = 0; c < C; ++c) y[c] = static_cast<float>(w[c]) * s[c / G];
  }
  return absl::OkStatus();
}

}  // namespace ladder
