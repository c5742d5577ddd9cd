// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/embedding.h"

#include "kernels/embedding.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "EmbeddingForward";
constexpr char kBwd[] = "EmbeddingBackward";

// The shapes shared by both directions: N from tokens, Vshard and C from the
// table, maxT from wpe (0 if empty); `d` prefixes the names in messages. The
// forward's table may be empty (the position rows alone: Vshard 0, C from out).
absl::Status CheckShapes(absl::string_view op, absl::string_view d, const Tensor& out,
                         const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                         const Tensor& wpe, int64_t vocab_start, int64_t* N, int64_t* C,
                         int64_t* vshard, int64_t* max_t, bool wte_optional = false) {
  if (tokens.empty() || tokens.dtype != DType::kI32 || !DimsValid(tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tokens has shape ", tokens.ShapeString(), ", expected i32 [N]"));
  }
  RETURN_IF_ERROR(CheckOnGpu(op, "tokens", tokens));
  *N = tokens.numel();
  if (wte.empty() && wte_optional && out.rank >= 1 && out.dim(-1) > 0) {
    *vshard = 0;
    *C = out.dim(-1);
  } else if (wte.dtype == DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", d, "wte is bf16; the CUDA backend computes in fp32 (bf16 weights are a CPU "
        "format for now)"));
  } else if (wte.empty() || wte.dtype != DType::kF32 || wte.rank != 2 || wte.dim(0) <= 0 ||
             wte.dim(1) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", d, "wte has shape ",
                                                   wte.ShapeString(), ", expected [Vshard,C] f32"));
  } else {
    RETURN_IF_ERROR(CheckOnGpu(op, absl::StrCat(d, "wte"), wte));
    *vshard = wte.dim(0);
    *C = wte.dim(1);
  }
  if (*N > INT_MAX || *C > INT_MAX || *vshard >= INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": too many tokens, channels or rows"));
  }
  if (vocab_start < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": vocab_start ", vocab_start, " is negative"));
  }
  *max_t = 0;
  if (!wpe.empty()) {
    if (wpe.dtype != DType::kF32 || wpe.rank != 2 || wpe.dim(0) <= 0 || wpe.dim(0) >= INT_MAX ||
        wpe.dim(1) != *C) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", d, "wpe has shape ",
                                                     wpe.ShapeString(), ", expected [maxT,", *C,
                                                     "] f32, or empty"));
    }
    RETURN_IF_ERROR(CheckOnGpu(op, absl::StrCat(d, "wpe"), wpe));
    *max_t = wpe.dim(0);
    RETURN_IF_ERROR(CheckNumel(op, "positions", positions, DType::kI32, *N));
  } else if (!positions.empty()) {
    RETURN_IF_ERROR(CheckNumel(op, "positions", positions, DType::kI32, *N));
  }
  return CheckRows(op, absl::StrCat(d, "out"), out, DType::kF32, *N, *C);
}

}  // namespace

absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte, Tensor wpe,
                              int64_t vocab_start, cudaStream_t stream) {
  int64_t N = 0, C = 0, vshard = 0, max_t = 0;
  RETURN_IF_ERROR(CheckShapes(kFwd, "", out, tokens, positions, wte, wpe, vocab_start, &N, &C,
                              &vshard, &max_t, /*wte_optional=*/true));
  return CudaStatus(kernels::LaunchEmbeddingForward(
                        out.f32(), tokens.i32(), positions.i32(), wte.empty() ? nullptr : wte.f32(),
                        wpe.empty() ? nullptr : wpe.f32(), static_cast<int>(N),
                        static_cast<int>(C), vocab_start, static_cast<int>(vshard),
                        static_cast<int>(max_t), stream),
                    kFwd);
}

int64_t EmbeddingBackwardScratchInts(int64_t rows) {
  if (rows <= 0 || rows > INT_MAX) return 0;
  return static_cast<int64_t>(kernels::EmbeddingBackwardScratchInts(static_cast<int>(rows)));
}

absl::Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                               Tensor positions, int64_t vocab_start, Tensor scratch,
                               cudaStream_t stream) {
  int64_t N = 0, C = 0, vshard = 0, max_t = 0;
  RETURN_IF_ERROR(CheckShapes(kBwd, "d", dout, tokens, positions, dwte, dwpe, vocab_start, &N, &C,
                              &vshard, &max_t));
  const int64_t need = EmbeddingBackwardScratchInts(N);
  if (need > 0) RETURN_IF_ERROR(CheckNumel(kBwd, "scratch", scratch, DType::kI32, need, true));
  return CudaStatus(kernels::LaunchEmbeddingBackward(
                        dwte.f32(), dwpe.empty() ? nullptr : dwpe.f32(), dout.f32(), tokens.i32(),
                        positions.i32(), static_cast<int>(N), static_cast<int>(C), vocab_start,
                        static_cast<int>(vshard), static_cast<int>(max_t), scratch.i32(), stream),
                    kBwd);
}

LADDER_CUDA_END
