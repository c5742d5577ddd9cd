// The CPU backend: the reference implementation of every op, fp32 throughout.
// GEMMs go to OpenBLAS (cblas_sgemm); everything else is OpenMP loops. Each op
// family lives in its own file (embedding.cc, layernorm.cc, matmul.cc,
// gelu.cc, attention.cc, cross_entropy.cc, optimizer.cc).
//
// Threads: OpenBLAS is linked in its OpenMP build, so BLAS calls and our own
// loops share one OpenMP pool instead of two pools fighting over the cores.
// A BLAS call made inside one of our parallel regions runs single-threaded.
#pragma once

#include <atomic>
#include <cstring>
#include <memory>

#include "src/backend/backend.h"

namespace ladder {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  Device device() const override { return Device::kCpu; }
  // Every op has finished when it returns: nothing is ever pending.
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte, Tensor wpe,
                                int64_t vocab_start) override;
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
  int64_t bytes_allocated() const override { return allocated_->load(); }
  absl::Status RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr) override;
  absl::Status Fill(Tensor x, float value) override;
  absl::Status CopyToHost(void* dst, Tensor src) override {
    std::memcpy(dst, src.data, src.bytes());
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(Tensor dst, const void* src) override {
    std::memcpy(dst.data, src, dst.bytes());
    return absl::OkStatus();
  }
  absl::Status Copy(Tensor dst, Tensor src) override;

 private:
  // Shared with the buffers' deleters, so a buffer may outlive the backend.
  std::shared_ptr<std::atomic<int64_t>> allocated_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace ladder
