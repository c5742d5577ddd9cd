// TaggedBackend: a Backend for tests that claims a device of its own while
// running every op on the CPU backend. The tensors it receives must carry
// that device (so the code under test tagged its views with device(), not
// Device::kCpu); it notes each one that does not, retags the views for the
// CPU backend underneath, and counts the calls of every op and copy. The
// memory stays host memory, so the results are the CPU backend's, bit for bit.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"

namespace ladder {

class TaggedBackend final : public Backend {
 public:
  // The device the views must carry: anything but kCpu tells a view built
  // with the backend's device from one that names the CPU by default.
  static constexpr Device kDevice = Device::kCuda;

  // Calls of `op` (an op's name, "CopyToHost", "CopyFromHost", ...) so far.
  int calls(const std::string& op) const {
    auto it = calls_.find(op);
    return it == calls_.end() ? 0 : it->second;
  }
  void ResetCalls() { calls_.clear(); }
  // "op" for every call that received a view not tagged kDevice.
  const std::vector<std::string>& mistagged() const { return mistagged_; }

  std::string_view name() const override { return "tagged"; }
  Device device() const override { return kDevice; }
  absl::Status Synchronize() override {
    Count("Synchronize");
    return cpu_.Synchronize();
  }

  absl::Status EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte, Tensor wpe,
                                int64_t vocab_start) override {
    const char* op = Count("EmbeddingForward");
    return cpu_.EmbeddingForward(In(op, out), In(op, tokens), In(op, positions), In(op, wte),
                                 In(op, wpe), vocab_start);
  }
  absl::Status EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                 Tensor positions, int64_t vocab_start) override {
    const char* op = Count("EmbeddingBackward");
    return cpu_.EmbeddingBackward(In(op, dwte), In(op, dwpe), In(op, dout), In(op, tokens),
                                  In(op, positions), vocab_start);
  }
  absl::Status ResidualLayerNormForward(Tensor residual_out, Tensor y, Tensor mean, Tensor rstd,
                                        Tensor residual_in, Tensor branch, Tensor gamma,
                                        Tensor beta) override {
    const char* op = Count("ResidualLayerNormForward");
    return cpu_.ResidualLayerNormForward(In(op, residual_out), In(op, y), In(op, mean),
                                         In(op, rstd), In(op, residual_in), In(op, branch),
                                         In(op, gamma), In(op, beta));
  }
  absl::Status ResidualLayerNormBackward(Tensor d_residual, Tensor dgamma, Tensor dbeta, Tensor dy,
                                         Tensor x, Tensor gamma, Tensor mean,
                                         Tensor rstd) override {
    const char* op = Count("ResidualLayerNormBackward");
    return cpu_.ResidualLayerNormBackward(In(op, d_residual), In(op, dgamma), In(op, dbeta),
                                          In(op, dy), In(op, x), In(op, gamma), In(op, mean),
                                          In(op, rstd));
  }
  absl::Status ResidualAdd(Tensor out, Tensor a, Tensor b) override {
    const char* op = Count("ResidualAdd");
    return cpu_.ResidualAdd(In(op, out), In(op, a), In(op, b));
  }
  absl::Status MatmulForward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override {
    const char* op = Count("MatmulForward");
    return cpu_.MatmulForward(In(op, out), In(op, inp), In(op, weight), In(op, bias));
  }
  absl::Status MatmulGeluForward(Tensor out, Tensor pre, Tensor inp, Tensor weight,
                                 Tensor bias) override {
    const char* op = Count("MatmulGeluForward");
    return cpu_.MatmulGeluForward(In(op, out), In(op, pre), In(op, inp), In(op, weight),
                                  In(op, bias));
  }
  absl::Status MatmulBackward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                              Tensor weight) override {
    const char* op = Count("MatmulBackward");
    return cpu_.MatmulBackward(In(op, dinp), In(op, dweight), In(op, dbias), In(op, dout),
                               In(op, inp), In(op, weight));
  }
  absl::Status MatmulGeluBackward(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                                  Tensor inp, Tensor weight, Tensor pre) override {
    const char* op = Count("MatmulGeluBackward");
    return cpu_.MatmulGeluBackward(In(op, dpre), In(op, dweight), In(op, dbias), In(op, dout),
                                   In(op, inp), In(op, weight), In(op, pre));
  }
  absl::Status GeluForward(Tensor out, Tensor inp) override {
    const char* op = Count("GeluForward");
    return cpu_.GeluForward(In(op, out), In(op, inp));
  }
  absl::Status GeluBackward(Tensor dinp, Tensor dout, Tensor inp) override {
    const char* op = Count("GeluBackward");
    return cpu_.GeluBackward(In(op, dinp), In(op, dout), In(op, inp));
  }
  absl::Status AttentionForward(Tensor out, Tensor lse, Tensor qkv, int num_heads,
                                AttentionKind kind, Tensor scratch) override {
    const char* op = Count("AttentionForward");
    return cpu_.AttentionForward(In(op, out), In(op, lse), In(op, qkv), num_heads, kind,
                                 In(op, scratch));
  }
  absl::Status AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                                 int num_heads, AttentionKind kind, Tensor scratch) override {
    const char* op = Count("AttentionBackward");
    return cpu_.AttentionBackward(In(op, dqkv), In(op, dout), In(op, qkv), In(op, out), In(op, lse),
                                  num_heads, kind, In(op, scratch));
  }
  absl::Status AttentionPartForward(Tensor out, Tensor lse, Tensor q_qkv, Tensor kv_qkv,
                                    Tensor q_pos, Tensor k_pos, int num_heads,
                                    bool merge) override {
    const char* op = Count("AttentionPartForward");
    return cpu_.AttentionPartForward(In(op, out), In(op, lse), In(op, q_qkv), In(op, kv_qkv),
                                     In(op, q_pos), In(op, k_pos), num_heads, merge);
  }
  absl::Status AttentionPartBackward(Tensor dq_qkv, Tensor dkv_qkv, Tensor dout, Tensor q_qkv,
                                     Tensor kv_qkv, Tensor out, Tensor lse, Tensor q_pos,
                                     Tensor k_pos, int num_heads) override {
    const char* op = Count("AttentionPartBackward");
    return cpu_.AttentionPartBackward(In(op, dq_qkv), In(op, dkv_qkv), In(op, dout), In(op, q_qkv),
                                      In(op, kv_qkv), In(op, out), In(op, lse), In(op, q_pos),
                                      In(op, k_pos), num_heads);
  }
  absl::Status KvCacheWrite(const PagedKv& cache, Tensor qkv, Tensor slots,
                            int num_heads) override {
    const char* op = Count("KvCacheWrite");
    return cpu_.KvCacheWrite(In(op, cache), In(op, qkv), In(op, slots), num_heads);
  }
  absl::Status PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                     Tensor block_tables, Tensor seq, Tensor pos,
                                     int num_heads) override {
    const char* op = Count("PagedAttentionForward");
    return cpu_.PagedAttentionForward(In(op, out), In(op, qkv), In(op, cache), In(op, block_tables),
                                      In(op, seq), In(op, pos), num_heads);
  }
  absl::Status MatmulInt8Forward(Tensor out, Tensor inp, Tensor q, Tensor scales,
                                 Tensor bias) override {
    const char* op = Count("MatmulInt8Forward");
    return cpu_.MatmulInt8Forward(In(op, out), In(op, inp), In(op, q), In(op, scales),
                                  In(op, bias));
  }
  absl::Status DequantizeRows(Tensor out, Tensor q, Tensor scales, Tensor rows) override {
    const char* op = Count("DequantizeRows");
    return cpu_.DequantizeRows(In(op, out), In(op, q), In(op, scales), In(op, rows));
  }
  absl::Status SampleTokens(Tensor logits, int vocab_size, absl::Span<const TokenSampleSpec> specs,
                            absl::Span<int32_t> ids) override {
    const char* op = Count("SampleTokens");
    return cpu_.SampleTokens(In(op, logits), vocab_size, specs, ids);
  }
  absl::Status CrossEntropyRowMax(Tensor row_max, Tensor logits, int64_t vocab_start,
                                  int vocab_size) override {
    const char* op = Count("CrossEntropyRowMax");
    return cpu_.CrossEntropyRowMax(In(op, row_max), In(op, logits), vocab_start, vocab_size);
  }
  absl::Status CrossEntropyPartials(Tensor sum_exp, Tensor target_logit, Tensor logits,
                                    Tensor targets, Tensor row_max, int64_t vocab_start,
                                    int vocab_size) override {
    const char* op = Count("CrossEntropyPartials");
    return cpu_.CrossEntropyPartials(In(op, sum_exp), In(op, target_logit), In(op, logits),
                                     In(op, targets), In(op, row_max), vocab_start, vocab_size);
  }
  absl::Status CrossEntropyLoss(Tensor losses, Tensor lse, Tensor row_max, Tensor sum_exp,
                                Tensor target_logit) override {
    const char* op = Count("CrossEntropyLoss");
    return cpu_.CrossEntropyLoss(In(op, losses), In(op, lse), In(op, row_max), In(op, sum_exp),
                                 In(op, target_logit));
  }
  absl::Status CrossEntropyBackward(Tensor dlogits, Tensor logits, Tensor targets, Tensor lse,
                                    int64_t vocab_start, int vocab_size, float dloss) override {
    const char* op = Count("CrossEntropyBackward");
    return cpu_.CrossEntropyBackward(In(op, dlogits), In(op, logits), In(op, targets), In(op, lse),
                                     vocab_start, vocab_size, dloss);
  }
  absl::Status CrossEntropyFused(Tensor losses, Tensor lse, Tensor logits, Tensor targets,
                                 int vocab_size, float dloss) override {
    const char* op = Count("CrossEntropyFused");
    return cpu_.CrossEntropyFused(In(op, losses), In(op, lse), In(op, logits), In(op, targets),
                                  vocab_size, dloss);
  }
  absl::Status SumOfSquares(Tensor x, Tensor out) override {
    const char* op = Count("SumOfSquares");
    return cpu_.SumOfSquares(In(op, x), In(op, out));
  }
  absl::Status AdamWUpdate(const std::vector<AdamWTensor>& tensors, const AdamWParams& p) override {
    const char* op = Count("AdamWUpdate");
    std::vector<AdamWTensor> on_cpu;
    for (const AdamWTensor& t : tensors) {
      on_cpu.push_back({In(op, t.param), In(op, t.grad), In(op, t.m), In(op, t.v), t.weight_decay,
                        t.param16.empty() ? Tensor() : In(op, t.param16), t.round_offset});
    }
    return cpu_.AdamWUpdate(on_cpu, p);
  }
  absl::Status RoundToBf16(Tensor dst, Tensor src, const StochasticRounding* sr) override {
    const char* op = Count("RoundToBf16");
    return cpu_.RoundToBf16(In(op, dst), In(op, src), sr);
  }
  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    Count("Allocate");
    return cpu_.Allocate(bytes);
  }
  int64_t bytes_allocated() const override { return cpu_.bytes_allocated(); }
  absl::Status Fill(Tensor x, float value) override {
    const char* op = Count("Fill");
    return cpu_.Fill(In(op, x), value);
  }
  absl::Status CopyToHost(void* dst, Tensor src) override {
    const char* op = Count("CopyToHost");
    return cpu_.CopyToHost(dst, In(op, src));
  }
  absl::Status CopyFromHost(Tensor dst, const void* src) override {
    const char* op = Count("CopyFromHost");
    return cpu_.CopyFromHost(In(op, dst), src);
  }
  absl::Status Copy(Tensor dst, Tensor src) override {
    const char* op = Count("Copy");
    return cpu_.Copy(In(op, dst), In(op, src));
  }

 private:
  const char* Count(const char* op) {
    ++calls_[op];
    return op;
  }
  Tensor In(const char* op, Tensor t) {
    if (!t.empty() && t.device != kDevice) mistagged_.push_back(op);
    t.device = Device::kCpu;
    return t;
  }
  PagedKv In(const char* op, const PagedKv& kv) {
    return {In(op, kv.k), In(op, kv.v), In(op, kv.k_scale), In(op, kv.v_scale)};
  }

  CpuBackend cpu_;
  std::map<std::string, int> calls_;
  std::vector<std::string> mistagged_;
};

}  // namespace ladder
