// Linear layer: out [N,OC] = inp [N,C] @ weight[OC,C]^T + bias[OC].
//
// The three GEMMs (forward, dinp, dweight) are where nearly all of a training
// step's FLOPs go, so they go to OpenBLAS. Row-major with the weight stored
// [out, in] means the forward multiplies by weight transposed (CblasTrans) and
// the backward's dinp = dout @ weight needs no transpose; dweight = dout^T @ inp
// uses beta = 1 so it accumulates into the existing gradient for free.
// The bias add and the bias gradient (column sums of dout) are cheap memory
// passes done here with OpenMP; the column sums give each thread its own
// columns and walk the rows in order, so they are deterministic.
//
// A forward over few tokens (decoding) is bound by reading the weights, not
// by FLOPs, and goes to ladder's own streaming kernel instead; bf16 weights
// (inference) take that kernel for few tokens and are widened a tile at a
// time for sgemm beyond (matmul_kernels.h says which and why).
#include <cblas.h>

#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/matmul_kernels.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "MatmulForward";
constexpr char kBwd[] = "MatmulBackward";

// weight must be [OC, C] for the given C (OC is read from it), f32 or bf16.
absl::Status CheckWeight(absl::string_view op, absl::string_view what, const Tensor& w, int64_t C) {
  if (w.empty() || (w.dtype != DType::kF32 && w.dtype != DType::kBF16) || w.rank != 2 ||
      w.dim(0) < 0 || w.dim(1) != C) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has shape ", w.ShapeString(),
                                                   w.empty() ? " (empty)" : "", ", expected [OC,",
                                                   C, "] f32 or bf16"));
  }
  return cpu::CheckCpu(op, what, w);
}

// BLAS takes int dimensions.
absl::Status CheckBlasDims(absl::string_view op, int64_t a, int64_t b, int64_t c) {
  if (a > INT_MAX || b > INT_MAX || c > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dimensions ", a, "x", b, "x", c, " exceed BLAS's int range"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CpuBackend::MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(cpu::RowView(kFwd, "inp", inp, DType::kF32, &N, &C));
  RETURN_IF_ERROR(CheckWeight(kFwd, "weight", weight, C));
  const int64_t OC = weight.dim(0);
  if (!bias.empty()) RETURN_IF_ERROR(cpu::CheckExact(kFwd, "bias", bias, DType::kF32, {OC}));
  RETURN_IF_ERROR(cpu::CheckRows(kFwd, "out", out, DType::kF32, N, OC));
  RETURN_IF_ERROR(CheckBlasDims(kFwd, N, OC, C));
  if (N == 0 || OC == 0) return absl::OkStatus();

  const float* x = inp.f32();
  const float* b = bias.empty() ? nullptr : bias.f32();
  float* y = out.f32();
  if (weight.dtype == DType::kBF16) {
    const bf16* w = weight.bf16();
    if (N <= cpu::kSmallBatch) {
      cpu::SmallMatmul(x, N, C, w, OC, b, y);
    } else {
      cpu::DequantizedSgemm(
          x, N, C, OC, 1,
          [&](int64_t r0, int64_t rows, float* dst) {
            for (int64_t i = 0; i < rows * C; ++i) dst[i] = Bf16ToFloat(w[r0 * C + i]);
          },
          b, y);
    }
    return absl::OkStatus();
  }
  if (N <= cpu::kSmallBatch) {
    cpu::SmallMatmul(x, N, C, weight.f32(), OC, b, y);
    return absl::OkStatus();
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(OC),
              static_cast<int>(C), 1.0f, x, static_cast<int>(C), weight.f32(), static_cast<int>(C),
              0.0f, y, static_cast<int>(OC));
  if (b != nullptr) cpu::AddBias(y, N, OC, b);
  return absl::OkStatus();
}

absl::Status CpuBackend::MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                        Tensor inp, Tensor weight) {
  int64_t N = 0, OC = 0;
  RETURN_IF_ERROR(cpu::RowView(kBwd, "dout", dout, DType::kF32, &N, &OC));
  if (weight.empty() || weight.rank != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(kBwd, ": weight has shape ", weight.ShapeString(), ", expected [", OC, ",C]"));
  }
  const int64_t C = weight.dim(1);
  RETURN_IF_ERROR(cpu::CheckExact(kBwd, "weight", weight, DType::kF32, {OC, C}));
  RETURN_IF_ERROR(cpu::CheckExact(kBwd, "dweight", dweight, DType::kF32, {OC, C}));
  RETURN_IF_ERROR(cpu::CheckRows(kBwd, "inp", inp, DType::kF32, N, C));
  if (!dinp.empty()) RETURN_IF_ERROR(cpu::CheckRows(kBwd, "dinp", dinp, DType::kF32, N, C));
  if (!dbias.empty()) RETURN_IF_ERROR(cpu::CheckExact(kBwd, "dbias", dbias, DType::kF32, {OC}));
  RETURN_IF_ERROR(CheckBlasDims(kBwd, N, OC, C));
  if (N == 0) return absl::OkStatus();

  const int n = static_cast<int>(N), oc = static_cast<int>(OC), c = static_cast<int>(C);
  const float* dout_p = dout.f32();
  // dinp [N,C] = dout [N,OC] @ weight [OC,C]   (overwrites)
  if (!dinp.empty() && C > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, c, oc, 1.0f, dout_p, oc, weight.f32(),
                c, 0.0f, dinp.f32(), c);
  }
  // dweight [OC,C] += dout^T [OC,N] @ inp [N,C]   (beta = 1 accumulates)
  if (C > 0) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, c, n, 1.0f, dout_p, oc, inp.f32(), c,
                1.0f, dweight.f32(), c);
  }
  // dbias [OC] += column sums of dout, each thread owning a slice of columns.
  if (!dbias.empty()) {
    float* db = dbias.f32();
#pragma omp parallel if (N * OC >= cpu::kParallelMin)
    {
      const cpu::Range r = cpu::ThreadRange(OC, 16, omp_get_thread_num(), omp_get_num_threads());
      for (int64_t row = 0; row < N; ++row) {
        const float* d = dout_p + row * OC;
        for (int64_t j = r.begin; j < r.end; ++j) db[j] += d[j];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
