// GELU, tanh approximation (as GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//
// Since 0.5 (1 + tanh(u)) = sigmoid(2u), we compute gelu(x) = x * sigmoid(2u)
// with one vectorizable exp (cpu::ExpF) instead of a libm tanhf call per
// element, which the compiler cannot vectorize. The sigmoid form also avoids
// the cancellation of 1 + tanh(u) for very negative x. The derivative, with
// sig = sigmoid(2u) and 1 - tanh(u)^2 = 4 sig (1 - sig):
//   gelu'(x) = sig + 2 x sig (1 - sig) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// The MLP's hidden activation is 4C wide, so this runs over the largest
// activation of the block: it must stay a cheap, vectorized memory pass.
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "GeluForward";
constexpr char kBwd[] = "GeluBackward";
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kCubic = 0.044715f;

// sigmoid(2u) for the input x.
inline float GeluSigmoid(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 1.0f / (1.0f + cpu::ExpF(-2.0f * u));
}

}  // namespace

absl::Status CpuBackend::GeluForward(Tensor out, Tensor inp) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(cpu::RowView(kFwd, "inp", inp, DType::kF32, &N, &C));
  RETURN_IF_ERROR(cpu::CheckRows(kFwd, "out", out, DType::kF32, N, C));
  const int64_t n = N * C;
  const float* x = inp.f32();
  float* o = out.f32();
#pragma omp parallel for schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] * GeluSigmoid(x[i]);
  return absl::OkStatus();
}

absl::Status CpuBackend::MatmulGeluForward(Tensor out, Tensor pre, Tensor inp, Tensor weight,
                                           Tensor bias) {
  if (!out.empty() && out.data == pre.data) {
    return absl::InvalidArgumentError("MatmulGeluForward: out and pre must not overlap");
  }
  RETURN_IF_ERROR(MatmulForward(pre, inp, weight, bias));
  return GeluForward(out, pre);
}

absl::Status CpuBackend::MatmulGeluBackward(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                                            Tensor inp, Tensor weight, Tensor pre) {
  if (!dpre.empty() && dpre.data == pre.data) {
    return absl::InvalidArgumentError("MatmulGeluBackward: dpre and pre must not overlap");
  }
  RETURN_IF_ERROR(MatmulBackward(dpre, dweight, dbias, dout, inp, weight));
  return GeluBackward(dpre, dpre, pre);
}

absl::Status CpuBackend::GeluBackward(Tensor dinp, Tensor dout, Tensor inp) {
  int64_t N = 0, C = 0;
  RETURN_IF_ERROR(cpu::RowView(kBwd, "inp", inp, DType::kF32, &N, &C));
  RETURN_IF_ERROR(cpu::CheckRows(kBwd, "dout", dout, DType::kF32, N, C));
  RETURN_IF_ERROR(cpu::CheckRows(kBwd, "dinp", dinp, DType::kF32, N, C));
  const int64_t n = N * C;
  const float* x = inp.f32();
  const float* d = dout.f32();
  float* di = dinp.f32();  // may alias d: each element is read before written
  // `simd` asserts no loop-carried dependence, so the aliased case still
  // vectorizes (without it the compiler's overlap check falls back to scalar).
#pragma omp parallel for simd schedule(static) if (n >= cpu::kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float sig = GeluSigmoid(xi);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * xi * xi);
    di[i] = d[i] * (sig + 2.0f * xi * sig * (1.0f - sig) * du);
  }
  return absl::OkStatus();
}

}  // namespace ladder
