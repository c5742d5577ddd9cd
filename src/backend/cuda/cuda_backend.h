// The CUDA backend: every op of backend.h on a CUDA device, fp32, enqueued on
// one stream owned by the backend. Each op checks its tensors (shapes,
// dtypes, Device::kCuda) and launches the kernels of its family
// (src/backend/cuda/<family>.h -> kernels/<family>.cu); matmuls go through
// cuBLASLt (matmul.h). Nothing waits except CopyToHost and Synchronize, so a
// fault inside a kernel surfaces as the error of a later call.
//
// Compiled twice like the kernels: for a GPU (name "cuda") where the toolkit
// is found, and in every build against the CUDA simulator (name "cuda-sim").
// Code outside src/backend/ reaches it only through the factory, with the
// functions of cuda_backends.h.
//
// Thread safety: as every Backend, one host thread at a time.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/namespace.h"
#include "src/backend/backend.h"
#include "src/backend/cuda/event_timer.h"
#include "src/backend/cuda/matmul.h"

LADDER_CUDA_BEGIN

class CudaBackend final : public Backend {
 public:
  // A stream, cuBLASLt handle and workspace on device `ordinal`, which
  // becomes the calling thread's current device. Fails (with the runtime's
  // reason) where that device is not usable.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int ordinal);
  ~CudaBackend() override;

  std::string_view name() const override;
  Device device() const override { return Device::kCuda; }
  absl::Status Synchronize() override;
  // The simulator's device memory is host memory (so MPI can carry it).
  bool memory_is_host() const override;
  // The stream every op is enqueued on (a communicator that must be ordered
  // with the ops enqueues on it too).
  cudaStream_t stream() const { return stream_; }
  // CUDA events on the stream (event_timer.h).
  DeviceTimer* timer() override { return &timer_; }
  // Stream capture into a CUDA graph (Backend::Capture): every op enqueues
  // on stream_, which captures in global mode.
  bool supports_graphs() const override { return true; }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(
      const std::function<absl::Status()>& body) override;

  absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                                Tensor wpe, int64_t vocab_start) override;
  absl::Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                 Tensor positions, int64_t vocab_start) override;
  absl::Status ResidualLayerNormForward(Tensor residual_out, Tensor y, Tensor mean, Tensor rstd,
                                        Tensor residual_in, Tensor branch, Tensor gamma,
                                        Tensor beta) override;
  absl::Status ResidualLayerNormBackward(Tensor d_residual, Tensor dgamma, Tensor dbeta, Tensor dy,
                                         Tensor x, Tensor gamma, Tensor mean, Tensor rstd) override;
  absl::Status ResidualAdd(Tensor out, Tensor a, Tensor b) override;
  absl::Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
  absl::Status MatmulGeluBackward(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                                  Tensor inp, Tensor weight, Tensor pre) override;
  absl::Status MatmulGeluForward(Tensor out, Tensor pre, Tensor inp, Tensor weight,
                                 Tensor bias) override;
  absl::Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                              Tensor weight) override;
  absl::Status GeluForward(Tensor out, Tensor inp) override;
  absl::Status GeluBackward(Tensor dinp, Tensor dout, Tensor inp) override;
  absl::Status AttentionForward(Tensor out, Tensor lse, Tensor qkv, int num_heads,
                                AttentionKind kind, Tensor scratch) override;
  absl::Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                 int num_heads, AttentionKind kind, Tensor scratch) override;
  absl::Status AttentionPartForward(Tensor out, Tensor lse, Tensor q_qkv, Tensor kv_qkv,
                                    Tensor q_pos, Tensor k_pos, int num_heads, bool merge) override;
  absl::Status AttentionPartBackward(Tensor dq_qkv, Tensor dkv_qkv, Tensor dout, Tensor q_qkv,
                                     Tensor kv_qkv, Tensor out, Tensor lse, Tensor q_pos,
                                     Tensor k_pos, int num_heads) override;
  absl::Status KvCacheWrite(const PagedKv& cache, Tensor qkv, Tensor slots, int num_heads) override;
  absl::Status PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                     Tensor block_tables, Tensor seq, Tensor pos,
                                     int num_heads) override;
  absl::Status MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales,
                                 Tensor bias) override;
  absl::Status DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows) override;
  // Waits for the stream: the ids come back to the host.
  absl::Status SampleTokens(Tensor logits, int vocab_size, absl::Span<const TokenSampleSpec> specs,
                            absl::Span<int32_t> ids) override;
  absl::Status CrossEntropyRowMax(Tensor row_max, Tensor logits, int64_t vocab_start,
                                  int vocab_size) override;
  absl::Status CrossEntropyPartials(Tensor sum_exp, Tensor target_logit, Tensor logits,
                                    Tensor targets, Tensor row_max, int64_t vocab_start,
                                    int vocab_size) override;
  absl::Status CrossEntropyLoss(Tensor losses, Tensor lse, Tensor row_max, Tensor sum_exp,
                                Tensor target_logit) override;
  absl::Status CrossEntropyFused(Tensor losses, Tensor lse, Tensor logits, Tensor targets,
                                 int vocab_size, float dloss) override;
  absl::Status CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets, Tensor lse,
                                    int64_t vocab_start, int vocab_size, float dloss) override;
  absl::Status SumOfSquares(Tensor x, Tensor out) override;
  absl::Status AdamWUpdate(const std::vector<AdamWTensor>& tensors,
                           const AdamWParams& p) override;

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  int64_t bytes_allocated() const override { return *bytes_allocated_; }
  absl::Status RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr) override;
  absl::Status Fill(Tensor x, float value) override;
  absl::Status CopyToHost(void* dst, Tensor src) override;
  absl::Status CopyFromHost(Tensor dst, const void* src) override;
  absl::Status CopyFromHostAsync(Tensor dst, const void* src) override;
  absl::Status WaitCopies() override;
  absl::Status Copy(Tensor dst, Tensor src) override;

 private:
  CudaBackend(cudaStream_t stream, std::unique_ptr<Matmuls> matmuls);
  // A device scratch of at least `bytes` (grown on demand, 16-byte aligned),
  // valid until the next call; viewed as f32 (or i32: the same bytes).
  absl::StatusOr<Tensor> Scratch(int64_t bytes, DType dtype);

  cudaStream_t stream_;
  EventTimer timer_;  // marks on stream_
  // CopyFromHostAsync's stream and its two events (created on first use):
  // ops_done_ marks stream_ where a copy may start, copies_done_ marks the
  // copy stream where WaitCopies makes stream_ wait.
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t ops_done_ = nullptr, copies_done_ = nullptr;
  std::unique_ptr<Matmuls> matmuls_;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  // Counts the scratch's reallocations: a graph recorded at an older count
  // points at freed scratch (DeviceGraph::valid). Shared with the graphs.
  std::shared_ptr<int64_t> scratch_generation_ = std::make_shared<int64_t>(0);
  bool capturing_ = false;  // inside Capture's body
  // Shared with the buffers' deleters: a buffer may outlive the backend.
  std::shared_ptr<int64_t> bytes_allocated_ = std::make_shared<int64_t>(0);
};

LADDER_CUDA_END
