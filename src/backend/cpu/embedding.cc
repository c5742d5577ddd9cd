// Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
//
// The forward is a gather, one row per token. The backward is a scatter-add,
// and two equal tokens would race on the same dwte row if we split the work by
// tokens. So the backward splits by *channels*: each thread owns a contiguous
// slice of the C channels and walks every token in order. No two threads ever
// touch the same float, and each float's sum is taken in token order, so the
// result does not depend on the thread count. dwpe rides along in the same pass.
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "EmbeddingForward";
constexpr char kBwd[] = "EmbeddingBackward";

// Validates tokens against the vocabulary so the gather/scatter stays in bounds.
absl::Status CheckTokens(absl::string_view op, const int32_t* tok, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if (tok[i] < 0 || tok[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": tokens[", i, "] = ", tok[i], " is outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

// Shapes shared by both directions: B, T from tokens, C and Vp from wte.
// `d` is "" for the forward and "d" for the backward (names in messages).
absl::Status CheckEmbeddingShapes(absl::string_view op, absl::string_view d, const Tensor& out,
                                  const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  if (tokens.empty() || tokens.dtype != DType::kI32 || tokens.rank != 2 || tokens.dim(0) < 0 ||
      tokens.dim(1) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tokens has shape ", tokens.ShapeString(), ", expected [B,T] i32"));
  }
  RETURN_IF_ERROR(cpu::CheckCpu(op, "tokens", tokens));
  if (wte.empty() || wte.dtype != DType::kF32 || wte.rank != 2 || wte.dim(0) <= 0 ||
      wte.dim(1) <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", d, "wte has shape ", wte.ShapeString(), ", expected [Vp,C] f32"));
  }
  RETURN_IF_ERROR(cpu::CheckCpu(op, absl::StrCat(d, "wte"), wte));
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = wte.dim(1);
  if (wpe.empty() || wpe.dtype != DType::kF32 || wpe.rank != 2 || wpe.dim(0) < T ||
      wpe.dim(1) != C) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", d, "wpe has shape ", wpe.ShapeString(),
                                                   ", expected [maxT,", C,
                                                   "] with maxT >= T = ", T));
  }
  RETURN_IF_ERROR(cpu::CheckCpu(op, absl::StrCat(d, "wpe"), wpe));
  RETURN_IF_ERROR(cpu::CheckExact(op, absl::StrCat(d, "out"), out, DType::kF32, {B, T, C}));
  return CheckTokens(op, tokens.i32(), B * T, wte.dim(0));
}

}  // namespace

absl::Status CpuBackend::EmbeddingForward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  RETURN_IF_ERROR(CheckEmbeddingShapes(kFwd, "", out, tokens, wte, wpe));
  const int64_t T = tokens.dim(1), C = wte.dim(1), N = tokens.numel();
  const int32_t* tok = tokens.i32();
  const float* wte_p = wte.f32();
  const float* wpe_p = wpe.f32();
  float* out_p = out.f32();
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const float* e = wte_p + static_cast<int64_t>(tok[n]) * C;
    const float* p = wpe_p + (n % T) * C;
    float* o = out_p + n * C;
    for (int64_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens) {
  RETURN_IF_ERROR(CheckEmbeddingShapes(kBwd, "d", dout, tokens, dwte, dwpe));
  const int64_t T = tokens.dim(1), C = dwte.dim(1), N = tokens.numel();
  const int32_t* tok = tokens.i32();
  const float* dout_p = dout.f32();
  float* dwte_p = dwte.f32();
  float* dwpe_p = dwpe.f32();
#pragma omp parallel if (N * C >= cpu::kParallelMin)
  {
    // This thread's channels; 16-float boundaries keep threads off each
    // other's cache lines.
    const cpu::Range r = cpu::ThreadRange(C, 16, omp_get_thread_num(), omp_get_num_threads());
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout_p + n * C;
      float* gw = dwte_p + static_cast<int64_t>(tok[n]) * C;
      float* gp = dwpe_p + (n % T) * C;
      for (int64_t c = r.begin; c < r.end; ++c) {
        gw[c] += d[c];
        gp[c] += d[c];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
