// Token + position embedding over a vocabulary shard, each token at its own
// position:
//   out[n,:] = (token in [vocab_start, vocab_start + Vshard) ? wte[token - vocab_start,:] : 0)
//            + (wpe empty ? 0 : wpe[positions[n],:])
// The single-process model passes the whole table (vocab_start = 0, every
// token in range); under tensor parallelism each rank holds a slice of the
// rows and the ranks' outputs are summed by an all-reduce.
//
// The forward is a gather, one row per token. The backward is a scatter-add,
// and two equal tokens (or two tokens at one position) would race on the same
// row if we split the work by tokens. So the backward splits by *rows*: thread
// t owns the dwte rows r with r % threads == t and the dwpe rows p with
// p % threads == t, walks every token id in order and adds the tokens whose
// rows it owns. No two threads ever touch the same float, and each float's sum
// is taken in token order, so the result does not depend on the thread count.
// Owning whole rows is also the faster split: the token rows are random 3 KB
// rows of a table far larger than the caches, and a thread that adds a whole
// row streams it and can ask for its next rows early (a prefetch for write
// kAhead tokens ahead, so that their misses overlap this row's adds). On
// GPT-2's shapes, 2 threads, the older split by channels (every thread
// walking every token for a slice of each row) took 3.0 ms, whole rows 2.4 ms
// and whole rows with the prefetch 2.0 ms (medians, docs/results.md).
// Interleaving rows (r % threads) rather than cutting the table in ranges
// balances the threads on real text, whose frequent tokens cluster at low ids.
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/core/bf16.h"

namespace ladder {
namespace {

constexpr char kFwd[] = "EmbeddingForward";
constexpr char kBwd[] = "EmbeddingBackward";

// Tokens outside the shard are legal (they contribute nothing); negative ones
// are not token ids at all. Positions index wpe's maxT rows when it is given.
absl::Status CheckIds(absl::string_view op, const int32_t* tok, const int32_t* pos, int64_t n,
                      int64_t max_t) {
  for (int64_t i = 0; i < n; ++i) {
    if (tok[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": tokens[", i, "] = ", tok[i], " is negative"));
    }
    if (max_t > 0 && (pos[i] < 0 || pos[i] >= max_t)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": positions[", i, "] = ", pos[i], " is outside [0, ", max_t, ")"));
    }
  }
  return absl::OkStatus();
}

// Shapes shared by both directions: N from tokens, C from wte (from out when
// the forward has no wte), Vshard from wte; wpe may be empty. `d` is "" for
// the forward and "d" for the backward (names in messages).
absl::Status CheckEmbedding(absl::string_view op, absl::string_view d, const Tensor& out,
                            const Tensor& tokens, const Tensor& positions, const Tensor& wte,
                            const Tensor& wpe, int64_t vocab_start) {
  if (tokens.empty() || tokens.dtype != DType::kI32 || !DimsValid(tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tokens has shape ", tokens.ShapeString(), ", expected N i32"));
  }
  RETURN_IF_ERROR(cpu::CheckCpu(op, "tokens", tokens));
  const int64_t N = tokens.numel();
  RETURN_IF_ERROR(cpu::CheckNumel(op, "positions", positions, DType::kI32, N));
  int64_t C = 0;
  if (wte.empty() && d.empty()) {
    int64_t rows = 0;
    RETURN_IF_ERROR(cpu::RowView(op, "out", out, DType::kF32, &rows, &C));
  } else {
    // The forward also reads a bf16 table (inference with --weights bf16).
    const bool dtype_ok = wte.dtype == DType::kF32 || (d.empty() && wte.dtype == DType::kBF16);
    if (wte.empty() || !dtype_ok || wte.rank != 2 || wte.dim(0) <= 0 || wte.dim(1) <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", d, "wte has shape ",
                                                     wte.ShapeString(), ", expected [Vshard,C] f32",
                                                     d.empty() ? " or bf16, or empty" : ""));
    }
    RETURN_IF_ERROR(cpu::CheckCpu(op, absl::StrCat(d, "wte"), wte));
    C = wte.dim(1);
  }
  if (vocab_start < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": vocab_start ", vocab_start, " is negative"));
  }
  if (!wpe.empty()) {
    if (wpe.dtype != DType::kF32 || wpe.rank != 2 || wpe.dim(0) <= 0 || wpe.dim(1) != C) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", d, "wpe has shape ",
                                                     wpe.ShapeString(), ", expected [maxT,", C,
                                                     "] f32, or empty"));
    }
    RETURN_IF_ERROR(cpu::CheckCpu(op, absl::StrCat(d, "wpe"), wpe));
  }
  RETURN_IF_ERROR(cpu::CheckRows(op, absl::StrCat(d, "out"), out, DType::kF32, N, C));
  return CheckIds(op, tokens.i32(), positions.i32(), N, wpe.empty() ? 0 : wpe.dim(0));
}

// Tokens ahead whose dwte row the backward prefetches, when this thread owns
// it (1 and 2 ahead did a little worse than 4).
constexpr int64_t kAhead = 4;

// The shard row of token `tok`, or -1 if the token is not in [vs, vs + rows).
inline int64_t ShardRow(int32_t tok, int64_t vs, int64_t rows) {
  const int64_t r = int64_t{tok} - vs;
  return r >= 0 && r < rows ? r : -1;
}

// The forward's gather for a table of E (float, or bf16 widened on the fly).
// A null wte (no token table) contributes nothing.
template <class E>
void EmbedRows(float* out, const int32_t* tok, const int32_t* pos, int64_t N, int64_t C,
               const E* wte, int64_t rows, int64_t vocab_start, const Tensor& wpe) {
  const float* wpe_p = wpe.empty() ? nullptr : wpe.f32();
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = wte != nullptr ? ShardRow(tok[n], vocab_start, rows) : -1;
    const E* e = r >= 0 ? wte + r * C : nullptr;
    const float* p = wpe_p != nullptr ? wpe_p + int64_t{pos[n]} * C : nullptr;
    float* o = out + n * C;
    if (e != nullptr && p != nullptr) {
      for (int64_t c = 0; c < C; ++c) o[c] = Widen(e[c]) + p[c];
    } else if (e != nullptr) {
      for (int64_t c = 0; c < C; ++c) o[c] = Widen(e[c]);
    } else if (p != nullptr) {
      for (int64_t c = 0; c < C; ++c) o[c] = p[c];
    } else {
      for (int64_t c = 0; c < C; ++c) o[c] = 0.0f;
    }
  }
}

}  // namespace

absl::Status CpuBackend::EmbeddingForward(Tensor out, Tensor tokens, Tensor positions, Tensor wte,
                                          Tensor wpe, int64_t vocab_start) {
  RETURN_IF_ERROR(CheckEmbedding(kFwd, "", out, tokens, positions, wte, wpe, vocab_start));
  const int64_t C = out.dim(-1), N = tokens.numel(), rows = wte.empty() ? 0 : wte.dim(0);
  if (wte.dtype == DType::kBF16) {
    EmbedRows(out.f32(), tokens.i32(), positions.i32(), N, C, wte.bf16(), rows, vocab_start, wpe);
  } else {
    EmbedRows(out.f32(), tokens.i32(), positions.i32(), N, C, wte.f32(), rows, vocab_start, wpe);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::EmbeddingBackward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens,
                                           Tensor positions, int64_t vocab_start) {
  RETURN_IF_ERROR(CheckEmbedding(kBwd, "d", dout, tokens, positions, dwte, dwpe, vocab_start));
  const int64_t C = dwte.dim(1), N = tokens.numel(), rows = dwte.dim(0);
  const int32_t* tok = tokens.i32();
  const int32_t* pos = positions.i32();
  const float* dout_p = dout.f32();
  float* dwte_p = dwte.f32();
  float* dwpe_p = dwpe.empty() ? nullptr : dwpe.f32();
#pragma omp parallel if (N * C >= cpu::kParallelMin)
  {
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t r = ShardRow(tok[n], vocab_start, rows);
      const int64_t p = pos[n];
      if (n + kAhead < N) {
        const int64_t next = ShardRow(tok[n + kAhead], vocab_start, rows);
        if (next >= 0 && next % nt == tid) cpu::PrefetchRowForWrite(dwte_p + next * C, C);
      }
      float* gw = r >= 0 && r % nt == tid ? dwte_p + r * C : nullptr;
      float* gp = dwpe_p != nullptr && p % nt == tid ? dwpe_p + p * C : nullptr;
      const float* d = dout_p + n * C;
      if (gw != nullptr) {
        for (int64_t c = 0; c < C; ++c) gw[c] += d[c];
      }
      if (gp != nullptr) {
        for (int64_t c = 0; c < C; ++c) gp[c] += d[c];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
