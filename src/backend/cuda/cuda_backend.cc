#include "src/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/memory.h"
#include "src/backend/cuda/attention.h"
#include "src/backend/cuda/attention_part.h"
#include "src/backend/cuda/bias_grad.h"
#include "src/backend/cuda/cross_entropy.h"
#include "src/backend/cuda/cuda_backends.h"
#include "src/backend/cuda/cuda_check.h"
#include "src/backend/cuda/elementwise.h"
#include "src/backend/cuda/embedding.h"
#include "src/backend/cuda/int8_matmul.h"
#include "src/backend/cuda/optimizer.h"
#include "src/backend/cuda/paged_attention.h"
#include "src/backend/cuda/residual_layernorm.h"
#include "src/backend/cuda/sampling.h"
#if !defined(LADDER_CUDA_SIM)
#include "src/parallel/nccl_comm.h"
#endif

LADDER_CUDA_BEGIN
namespace {

constexpr size_t kAlign = 64;  // Allocate's promise (cudaMalloc gives 256)

}  // namespace

CudaBackend::CudaBackend(cudaStream_t stream, std::unique_ptr<Matmuls> matmuls)
    : stream_(stream), timer_(stream), matmuls_(std::move(matmuls)) {}

CudaBackend::~CudaBackend() {
  matmuls_.reset();
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (copy_stream_ != nullptr) {
    cudaEventDestroy(ops_done_);
    cudaEventDestroy(copies_done_);
    cudaStreamDestroy(copy_stream_);
  }
  cudaStreamDestroy(stream_);
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int ordinal) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  cudaStream_t stream = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&stream), "cudaStreamCreate"));
  absl::StatusOr<std::unique_ptr<Matmuls>> matmuls = Matmuls::Create(stream);
  if (!matmuls.ok()) {
    cudaStreamDestroy(stream);
    return matmuls.status();
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(stream, std::move(*matmuls)));
}

std::string_view CudaBackend::name() const {
#if defined(LADDER_CUDA_SIM)
  return "cuda-sim";
#else
  return "cuda";
#endif
}

bool CudaBackend::memory_is_host() const {
#if defined(LADDER_CUDA_SIM)
  return true;
#else
  return false;
#endif
}

absl::Status CudaBackend::Synchronize() {
  return CudaStatus(cudaStreamSynchronize(stream_), "Synchronize");
}

absl::StatusOr<Tensor> CudaBackend::Scratch(int64_t bytes, DType dtype) {
  if (bytes > scratch_bytes_) {
    if (capturing_) {
      return absl::FailedPreconditionError(
          absl::StrCat("an op needs ", bytes, " bytes of scratch while a graph is recorded (",
                       scratch_bytes_, " held): run the ops once before capturing them"));
    }
    ++*scratch_generation_;
    if (scratch_ != nullptr) {
      // cudaFree waits for the device, so no enqueued kernel still uses it.
      RETURN_IF_ERROR(CudaStatus(cudaFree(scratch_), "scratch"));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&scratch_, static_cast<size_t>(bytes)), "scratch"));
    scratch_bytes_ = bytes;
  }
  const int64_t n = std::max<int64_t>(1, bytes / static_cast<int64_t>(DTypeSize(dtype)));
  return Tensor(scratch_, dtype, {n}, Device::kCuda);
}

// ---- graphs -------------------------------------------------------------------

namespace {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream, std::shared_ptr<const int64_t> generation)
      : exec_(exec), stream_(stream), generation_(std::move(generation)), recorded_(*generation_) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  absl::Status Replay() override {
    if (!valid()) {
      return absl::FailedPreconditionError(
          "graph replay: the backend's scratch moved since the graph was recorded");
    }
    return CudaStatus(cudaGraphLaunch(exec_, stream_), "graph replay");
  }
  bool valid() const override { return *generation_ == recorded_; }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  std::shared_ptr<const int64_t> generation_;
  int64_t recorded_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGraph>> CudaBackend::Capture(
    const std::function<absl::Status()>& body) {
  if (capturing_) return absl::FailedPreconditionError("Capture inside a capture");
  RETURN_IF_ERROR(CudaStatus(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal),
                             "begin graph capture"));
  capturing_ = true;
  const absl::Status body_status = body();
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (!body_status.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the refused call's error is reported here, not by the next op
    // An op refused by the capture fails with the capture's error; the
    // end of the capture says which call invalidated it.
    RETURN_IF_ERROR(CudaStatus(ended, "graph capture"));
    return body_status;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  RETURN_IF_ERROR(CudaStatus(instantiated, "graph instantiate"));
  return std::unique_ptr<DeviceGraph>(new CudaGraph(exec, stream_, scratch_generation_));
}

// ---- ops ----------------------------------------------------------------------

absl::Status CudaBackend::EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                                           Tensor wpe, int64_t vocab_start) {
  return cuda::EmbeddingForward(out, tokens, positions, wte, wpe, vocab_start, stream_);
}

absl::Status CudaBackend::EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                            Tensor positions, int64_t vocab_start) {
  ASSIGN_OR_RETURN(Tensor scratch,
                   Scratch(4 * cuda::EmbeddingBackwardScratchInts(tokens.numel()), DType::kI32));
  return cuda::EmbeddingBackward(dwte, dwpe, dout, tokens, positions, vocab_start, scratch,
                                 stream_);
}

absl::Status CudaBackend::ResidualLayerNormForward(Tensor residual_out, Tensor y, Tensor mean,
                                                   Tensor rstd, Tensor residual_in, Tensor branch,
                                                   Tensor gamma, Tensor beta) {
  return cuda::ResidualLayerNormForward(residual_out, y, mean, rstd, residual_in, branch, gamma,
                                        beta, stream_);
}

absl::Status CudaBackend::ResidualLayerNormBackward(Tensor d_residual, Tensor dgamma, Tensor dbeta,
                                                    Tensor dy, Tensor x, Tensor gamma, Tensor mean,
                                                    Tensor rstd) {
  const int64_t C = x.rank > 0 ? x.dim(-1) : 0;
  const int64_t N = C > 0 ? x.numel() / C : 0;
  ASSIGN_OR_RETURN(Tensor scratch,
                   Scratch(4 * cuda::ResidualLayerNormBackwardScratchFloats(N, C), DType::kF32));
  return cuda::ResidualLayerNormBackward(d_residual, dgamma, dbeta, dy, x, gamma, mean, rstd,
                                         scratch, stream_);
}

absl::Status CudaBackend::ResidualAdd(Tensor out, Tensor a, Tensor b) {
  return cuda::ResidualAdd(out, a, b, stream_);
}

absl::Status CudaBackend::MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  return matmuls_->Forward(out, inp, weight, bias);
}

absl::Status CudaBackend::MatmulGeluForward(Tensor out, Tensor pre, Tensor inp, Tensor weight,
                                            Tensor bias) {
  const absl::Status fused = matmuls_->GeluForward(out, pre, inp, weight, bias);
  if (!absl::IsUnimplemented(fused)) return fused;
  // The epilogue does not apply to this shape: the GEMM, then the GELU kernel.
  RETURN_IF_ERROR(matmuls_->Forward(pre, inp, weight, bias));
  return cuda::GeluForward(out, pre, stream_);
}

absl::Status CudaBackend::MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout,
                                         Tensor inp, Tensor weight) {
  Tensor scratch;
  if (!dbias.empty()) {
    const int64_t OC = dout.rank > 0 ? dout.dim(-1) : 0;
    const int64_t N = OC > 0 ? dout.numel() / OC : 0;
    ASSIGN_OR_RETURN(scratch, Scratch(4 * cuda::BiasGradScratchFloats(N, OC), DType::kF32));
  }
  return matmuls_->Backward(dinp, dweight, dbias, dout, inp, weight, scratch);
}

absl::Status CudaBackend::MatmulGeluBackward(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                                             Tensor inp, Tensor weight, Tensor pre) {
  Tensor scratch;
  if (!dbias.empty()) {
    const int64_t OC = dout.rank > 0 ? dout.dim(-1) : 0;
    const int64_t N = OC > 0 ? dout.numel() / OC : 0;
    ASSIGN_OR_RETURN(scratch, Scratch(4 * cuda::BiasGradScratchFloats(N, OC), DType::kF32));
  }
  const absl::Status fused =
      matmuls_->GeluBackward(dpre, dweight, dbias, dout, inp, weight, pre, scratch);
  if (!absl::IsUnimplemented(fused)) return fused;
  // The epilogue does not apply to this shape: the backward, then the GELU's.
  RETURN_IF_ERROR(matmuls_->Backward(dpre, dweight, dbias, dout, inp, weight, scratch));
  return cuda::GeluBackward(dpre, dpre, pre, stream_);
}

absl::Status CudaBackend::GeluForward(Tensor out, Tensor inp) {
  return cuda::GeluForward(out, inp, stream_);
}

absl::Status CudaBackend::GeluBackward(Tensor dinp, Tensor dout, Tensor inp) {
  return cuda::GeluBackward(dinp, dout, inp, stream_);
}

absl::Status CudaBackend::AttentionForward(Tensor out, Tensor lse, Tensor qkv, int num_heads,
                                           AttentionKind kind, Tensor scratch) {
  return cuda::AttentionForward(out, lse, qkv, num_heads, kind, scratch, stream_);
}

absl::Status CudaBackend::AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                            Tensor lse, int num_heads, AttentionKind kind,
                                            Tensor scratch) {
  return cuda::AttentionBackward(dqkv, dout, qkv, out, lse, num_heads, kind, scratch, stream_);
}

absl::Status CudaBackend::AttentionPartForward(Tensor out, Tensor lse, Tensor q_qkv, Tensor kv_qkv,
                                               Tensor q_pos, Tensor k_pos, int num_heads,
                                               bool merge) {
  return cuda::AttentionPartForward(out, lse, q_qkv, kv_qkv, q_pos, k_pos, num_heads, merge,
                                    stream_);
}

absl::Status CudaBackend::AttentionPartBackward(Tensor dq_qkv, Tensor dkv_qkv, Tensor dout,
                                                Tensor q_qkv, Tensor kv_qkv, Tensor out, Tensor lse,
                                                Tensor q_pos, Tensor k_pos, int num_heads) {
  return cuda::AttentionPartBackward(dq_qkv, dkv_qkv, dout, q_qkv, kv_qkv, out, lse, q_pos, k_pos,
                                     num_heads, stream_);
}

absl::Status CudaBackend::KvCacheWrite(const PagedKv& cache, Tensor qkv, Tensor slots,
                                       int num_heads) {
  return cuda::KvCacheWrite(cache, qkv, slots, num_heads, stream_);
}

absl::Status CudaBackend::PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                                Tensor block_tables, Tensor seq, Tensor pos,
                                                int num_heads) {
  ASSIGN_OR_RETURN(Tensor scratch,
                   Scratch(4 * std::max<int64_t>(1, cuda::PagedAttentionScratchFloats(
                                                        qkv, block_tables, num_heads)),
                           DType::kF32));
  return cuda::PagedAttentionForward(out, qkv, cache, block_tables, seq, pos, num_heads, scratch,
                                     stream_);
}

absl::Status CudaBackend::MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales,
                                            Tensor bias) {
  return cuda::MatmulInt8Forward(out, inp, q, scales, bias, stream_);
}

absl::Status CudaBackend::DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows) {
  return cuda::DequantizeRows(out, q, scales, rows, stream_);
}

absl::Status CudaBackend::SampleTokens(Tensor logits, int vocab_size,
                                       absl::Span<const TokenSampleSpec> specs,
                                       absl::Span<int32_t> ids) {
  ASSIGN_OR_RETURN(
      Tensor scratch,
      Scratch(
          std::max<int64_t>(8, cuda::SampleTokensScratchBytes(static_cast<int64_t>(specs.size()))),
          DType::kF32));
  return cuda::SampleTokens(logits, vocab_size, specs, ids, scratch, stream_);
}

absl::Status CudaBackend::CrossEntropyRowMax(Tensor row_max, Tensor logits, int64_t vocab_start,
                                             int vocab_size) {
  return cuda::CrossEntropyRowMax(row_max, logits, vocab_start, vocab_size, stream_);
}

absl::Status CudaBackend::CrossEntropyPartials(Tensor sum_exp, Tensor target_logit, Tensor logits,
                                               Tensor targets, Tensor row_max, int64_t vocab_start,
                                               int vocab_size) {
  return cuda::CrossEntropyPartials(sum_exp, target_logit, logits, targets, row_max, vocab_start,
                                    vocab_size, stream_);
}

absl::Status CudaBackend::CrossEntropyLoss(Tensor losses, Tensor lse, Tensor row_max,
                                           Tensor sum_exp, Tensor target_logit) {
  return cuda::CrossEntropyLoss(losses, lse, row_max, sum_exp, target_logit, stream_);
}

absl::Status CudaBackend::CrossEntropyFused(Tensor losses, Tensor lse, Tensor logits,
                                            Tensor targets, int vocab_size, float dloss) {
  return cuda::CrossEntropyFused(losses, lse, logits, targets, vocab_size, dloss, stream_);
}

absl::Status CudaBackend::CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets,
                                               Tensor lse, int64_t vocab_start, int vocab_size,
                                               float dloss) {
  return cuda::CrossEntropyBackward(dlogits, logits, targets, lse, vocab_start, vocab_size, dloss,
                                    stream_);
}

absl::Status CudaBackend::SumOfSquares(Tensor x, Tensor out) {
  ASSIGN_OR_RETURN(Tensor scratch,
                   Scratch(4 * cuda::SumOfSquaresScratchFloats(x.numel()), DType::kF32));
  return cuda::SumOfSquares(out, x, scratch, stream_);
}

absl::Status CudaBackend::AdamWUpdate(const std::vector<AdamWTensor>& tensors,
                                      const AdamWParams& p) {
  const int64_t bytes = cuda::AdamWDescriptorBytes(static_cast<int>(tensors.size()));
  ASSIGN_OR_RETURN(Tensor descriptors, Scratch(std::max<int64_t>(bytes, 8), DType::kF32));
  return cuda::AdamWUpdate(tensors, p, descriptors, stream_);
}

// ---- memory -------------------------------------------------------------------

absl::StatusOr<DeviceBuffer> CudaBackend::Allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = nullptr;
  if (rounded > 0) {
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, rounded), "Allocate"));
    // Zeroed in stream order: every later op on the stream sees zeros.
    const absl::Status zeroed = CudaStatus(cudaMemsetAsync(p, 0, rounded, stream_), "Allocate");
    if (!zeroed.ok()) {
      cudaFree(p);
      return zeroed;
    }
  }
  *bytes_allocated_ += static_cast<int64_t>(rounded);
  return DeviceBuffer(p, [counter = bytes_allocated_, rounded](void* q) {
    if (q != nullptr) cudaFree(q);
    *counter -= static_cast<int64_t>(rounded);
  });
}

absl::Status CudaBackend::RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr) {
  return cuda::RoundToBf16(dst, src, sr, stream_);
}

absl::Status CudaBackend::Fill(Tensor x, float value) {
  RETURN_IF_ERROR(CheckOnGpu("Fill", "x", x));
  return WithStorage("Fill", "x", x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return CudaStatus(kernels::LaunchFill(Data<T>(x), x.numel(), value, stream_), "Fill");
  });
}

absl::Status CudaBackend::CopyToHost(void* dst, Tensor src) {
  RETURN_IF_ERROR(CheckOnGpu("CopyToHost", "src", src));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_), "CopyToHost"));
  return CudaStatus(cudaStreamSynchronize(stream_), "CopyToHost");
}

absl::Status CudaBackend::CopyFromHost(Tensor dst, const void* src) {
  RETURN_IF_ERROR(CheckOnGpu("CopyFromHost", "dst", dst));
  // From pageable memory the runtime stages the bytes before returning, so
  // `src` may be reused at once (the contract of Backend::CopyFromHost).
  return CudaStatus(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, stream_),
                    "CopyFromHost");
}

absl::Status CudaBackend::CopyFromHostAsync(Tensor dst, const void* src) {
  constexpr char kOp[] = "CopyFromHostAsync";
  RETURN_IF_ERROR(CheckOnGpu(kOp, "dst", dst));
  if (copy_stream_ == nullptr) {
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreate(&copy_stream_), kOp));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&ops_done_), kOp));
    RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&copies_done_), kOp));
  }
  // The copy waits for the ops enqueued so far (it may overwrite what they
  // read), then runs beside the ones enqueued after it.
  RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ops_done_, stream_), kOp));
  RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(copy_stream_, ops_done_), kOp));
  RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, copy_stream_), kOp));
  return CudaStatus(cudaEventRecord(copies_done_, copy_stream_), kOp);
}

absl::Status CudaBackend::WaitCopies() {
  if (copy_stream_ == nullptr) return absl::OkStatus();
  return CudaStatus(cudaStreamWaitEvent(stream_, copies_done_), "WaitCopies");
}

absl::Status CudaBackend::Copy(Tensor dst, Tensor src) {
  RETURN_IF_ERROR(ladder::CheckCopy(Device::kCuda, "Copy", dst, src));
  return CudaStatus(
      cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDeviceToDevice, stream_), "Copy");
}

LADDER_CUDA_END

namespace ladder {

#if defined(LADDER_CUDA_SIM)
absl::StatusOr<std::unique_ptr<Backend>> NewCudaSimBackend() {
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> backend, cuda::CudaBackend::Create(0));
  return std::unique_ptr<Backend>(std::move(backend));
}
#else
absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int ordinal) {
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> backend, cuda::CudaBackend::Create(ordinal));
  return std::unique_ptr<Backend>(std::move(backend));
}

absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(const Backend& backend,
                                                                  Communicator& host,
                                                                  double timeout_seconds) {
  const auto* gpu = dynamic_cast<const cuda::CudaBackend*>(&backend);
  if (gpu == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL carries only the CUDA backend's tensors, not ", std::string(backend.name()), "'s"));
  }
  return CreateNcclCommunicator(host, gpu->stream(), timeout_seconds);
}
#endif

}  // namespace ladder
