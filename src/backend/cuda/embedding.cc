// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/embedding.h"

#include "kernels/embedding.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "EmbeddingForward";
constexpr char kBwd[] = "EmbeddingBackward";

// OK iff the table `t` (wte or wpe, `d` prefixing the name) has dtype
// `table`: the rows' (out's) storage dtype in the forward, f32 (a parameter
// gradient) in the backward. An empty table passes (the shape checks follow).
absl::Status CheckTableDType(absl::string_view op, absl::string_view d, absl::string_view name,
                             const Tensor& t, DType table, const Tensor& rows) {
  if (t.empty() || t.dtype == table) return absl::OkStatus();
  if (!d.empty()) {  // the backward's tables are the gradients dwte, dwpe
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", d, name, " is ", DTypeName(t.dtype),
        ", expected f32 (parameter gradients accumulate in fp32 whatever dout's dtype)"));
  }
  if (t.dtype == DType::kBF16 && rows.dtype == DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", name,
        " is bf16 but out is f32; the CUDA backend reads bf16 weights only "
        "into bf16 activations (bf16 weights with f32 activations are a CPU serving format)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is ", DTypeName(t.dtype),
                                                 ", expected ", DTypeName(table),
                                                 " like out (one storage dtype per call)"));
}

// The shapes shared by both directions: N from tokens, Vshard and C from the
// table, maxT from wpe (0 if empty); `d` prefixes the names in messages. The
// forward's table may be empty (the position rows alone: Vshard 0, C from out).
// wte and wpe must have dtype `table`; out's (dout's) own dtype is left to
// the caller's WithStorage (f32 or bf16).
absl::Status CheckShapes(absl::string_view op, absl::string_view d, const Tensor& out,
                         const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                         const Tensor& wpe, int64_t vocab_start, DType table, int64_t* N,
                         int64_t* C, int64_t* vshard, int64_t* max_t, bool wte_optional = false) {
  if (tokens.empty() || tokens.dtype != DType::kI32 || !DimsValid(tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tokens has shape ", tokens.ShapeString(), ", expected i32 [N]"));
  }
  RETURN_IF_ERROR(CheckOnGpu(op, "tokens", tokens));
  *N = tokens.numel();
  RETURN_IF_ERROR(CheckTableDType(op, d, "wte", wte, table, out));
  RETURN_IF_ERROR(CheckTableDType(op, d, "wpe", wpe, table, out));
  if (wte.empty() && wte_optional && out.rank >= 1 && out.dim(-1) > 0) {
    *vshard = 0;
    *C = out.dim(-1);
  } else if (wte.empty() || wte.rank != 2 || wte.dim(0) <= 0 || wte.dim(1) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", d, "wte has shape ", wte.ShapeString(),
                                                   ", expected [Vshard,C] ", DTypeName(table)));
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
    if (wpe.rank != 2 || wpe.dim(0) <= 0 || wpe.dim(0) >= INT_MAX || wpe.dim(1) != *C) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", d, "wpe has shape ",
                                                     wpe.ShapeString(), ", expected [maxT,", *C,
                                                     "] ", DTypeName(table), ", or empty"));
    }
    RETURN_IF_ERROR(CheckOnGpu(op, absl::StrCat(d, "wpe"), wpe));
    *max_t = wpe.dim(0);
    RETURN_IF_ERROR(CheckNumel(op, "positions", positions, DType::kI32, *N));
  } else if (!positions.empty()) {
    RETURN_IF_ERROR(CheckNumel(op, "positions", positions, DType::kI32, *N));
  }
  return CheckRows(op, absl::StrCat(d, "out"), out, out.dtype, *N, *C);
}

}  // namespace

absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte, Tensor wpe,
                              int64_t vocab_start, cudaStream_t stream) {
  int64_t N = 0, C = 0, vshard = 0, max_t = 0;
  RETURN_IF_ERROR(CheckShapes(kFwd, "", out, tokens, positions, wte, wpe, vocab_start, out.dtype,
                              &N, &C, &vshard, &max_t, /*wte_optional=*/true));
  return WithStorage(kFwd, "out", out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchEmbeddingForward<T>(
            Data<T>(out), tokens.i32(), positions.i32(), wte.empty() ? nullptr : Data<T>(wte),
            wpe.empty() ? nullptr : Data<T>(wpe), static_cast<int>(N), static_cast<int>(C),
            vocab_start, static_cast<int>(vshard), static_cast<int>(max_t), stream),
        kFwd);
  });
}

int64_t EmbeddingBackwardScratchInts(int64_t rows) {
  if (rows <= 0 || rows > INT_MAX) return 0;
  return static_cast<int64_t>(kernels::EmbeddingBackwardScratchInts(static_cast<int>(rows)));
}

absl::Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                               Tensor positions, int64_t vocab_start, Tensor scratch,
                               cudaStream_t stream) {
  int64_t N = 0, C = 0, vshard = 0, max_t = 0;
  RETURN_IF_ERROR(CheckShapes(kBwd, "d", dout, tokens, positions, dwte, dwpe, vocab_start,
                              DType::kF32, &N, &C, &vshard, &max_t));
  const int64_t need = EmbeddingBackwardScratchInts(N);
  if (need > 0) RETURN_IF_ERROR(CheckNumel(kBwd, "scratch", scratch, DType::kI32, need, true));
  return WithStorage(kBwd, "dout", dout.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(
        kernels::LaunchEmbeddingBackward<T>(
            dwte.f32(), dwpe.empty() ? nullptr : dwpe.f32(), Data<T>(dout), tokens.i32(),
            positions.i32(), static_cast<int>(N), static_cast<int>(C), vocab_start,
            static_cast<int>(vshard), static_cast<int>(max_t), scratch.i32(), stream),
        kBwd);
  });
}

LADDER_CUDA_END
