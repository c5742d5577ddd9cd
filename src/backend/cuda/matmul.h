// The CUDA backend's matmuls (Backend::MatmulForward/Backward semantics)
// through cuBLASLt: the forward with the bias added by cuBLASLt's epilogue,
// the backward's two products (dweight accumulated through beta = 1) and the
// bias gradient as a kernel (kernels/bias_grad.cu). Under the simulator the
// same code runs against its cuBLASLt stand-in (a host GEMM).
//
// Precision (backend.h): activations and weights are all f32 or all bf16.
// bf16 products run on the tensor cores with fp32 accumulation
// (CUBLAS_COMPUTE_32F) and round once when stored; the weight gradient is
// always an fp32 output (C = D fp32 with bf16 A and B, a combination
// cuBLASLt supports), so it accumulates over microbatches without bf16
// rounding.
//
// Row-major to cuBLASLt's column-major: a row-major [R, K] matrix is a
// column-major [K, R] one with leading dimension K, so out = inp @ W^T
// becomes out^T (OC x N) = W^T-as-stored (op T of the C x OC matrix W) times
// inp^T (C x N), and so on for the backward (matmul.cc spells each out).
//
// Thread safety: one Matmuls per stream and host thread; calls enqueue on the
// stream given at creation and return without waiting.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/namespace.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

class Matmuls {
 public:
  // A cuBLASLt handle and one workspace (kWorkspaceBytes of device memory).
  static absl::StatusOr<std::unique_ptr<Matmuls>> Create(cudaStream_t stream);
  ~Matmuls();
  Matmuls(const Matmuls&) = delete;
  Matmuls& operator=(const Matmuls&) = delete;

  // out [N,OC] = inp [N,C] @ weight[OC,C]^T + bias[OC] (bias may be empty).
  absl::Status Forward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
  // pre = inp @ weight^T + bias and out = gelu(pre) in one GEMM
  // (CUBLASLT_EPILOGUE_GELU_AUX_BIAS: D = out, the epilogue's auxiliary
  // matrix = pre). Unimplemented, with nothing enqueued, where the epilogue
  // does not apply: OC not a multiple of 8 (its leading dimension must be),
  // or no algorithm for the shape; the caller then runs Forward and the GELU
  // kernel.
  absl::Status GeluForward(Tensor out, Tensor pre, Tensor inp, Tensor weight, Tensor bias);
  // dinp [N,C] = dout @ weight (overwritten; skipped if empty);
  // dweight [OC,C] += dout^T @ inp; dbias [OC] += column sums of dout (if
  // non-empty; then scratch needs BiasGradScratchFloats(N, OC) floats).
  absl::Status Backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                        Tensor weight, Tensor scratch);
  // Backward of a projection whose input is inp = gelu(pre), the GELU's
  // backward in the same GEMM: dpre [N,C] = (dout @ weight) * gelu'(pre)
  // (CUBLASLT_EPILOGUE_DGELU, the auxiliary matrix = pre), then dweight and
  // dbias as Backward. Unimplemented, with nothing enqueued, where the
  // epilogue does not apply (C not a multiple of 8, no algorithm); the
  // caller then runs Backward and the GELU backward kernel.
  absl::Status GeluBackward(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                            Tensor weight, Tensor pre, Tensor scratch);

  static constexpr size_t kWorkspaceBytes = 32 << 20;  // cuBLASLt's advice for Hopper

 private:
  struct Impl;
  explicit Matmuls(std::unique_ptr<Impl> impl);
  // D (m x n, column-major, ldd = m) = op(A) op(B) + beta D (+ bias[m]):
  // A and B of type ab, D and bias of type dt (cudaDataType_t values).
  // With gelu_aux (m x n, ld m, type dt): kGelu: D = gelu(op(A) op(B) (+
  // bias)) and gelu_aux = the value before the GELU; kDGelu: D = op(A) op(B)
  // * gelu'(gelu_aux). Unimplemented if cuBLASLt has no algorithm for the
  // epilogue.
  enum class GeluEpilogue { kGelu, kDGelu };
  absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int ab,
                    const void* a, int64_t lda, const void* b, int64_t ldb, float beta, int dt,
                    void* d, const void* bias, void* gelu_aux = nullptr,
                    GeluEpilogue gelu = GeluEpilogue::kGelu);
  // Backward's dweight and dbias.
  absl::Status WeightGrads(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor scratch,
                           int ab);
  std::unique_ptr<Impl> impl_;
};

LADDER_CUDA_END
