// Attention over a paged KV cache, for decoding (inference only).
//
// Training attends a whole [T, T] causal square at once (attention.cc).
// Serving adds a few tokens per sequence per step (one when decoding, a
// chunk when prefilling) to sequences of different lengths whose keys and
// values were computed in earlier steps and kept in the cache, scattered over
// fixed-size blocks so that no sequence needs contiguous memory. So each new
// token is a query that walks its own sequence's block table: for position
// p, block table[p / 16], row p % 16.
//
// Per (token, head) this is one row of the softmax with an online max, as in
// the flash variant: scores s_p = q . k_p / sqrt(HS) for p = 0..pos, running
// max m and sum l of exp(s - m), output accumulated as sum exp(s_p - m) v_p
// and rescaled whenever m grows; O /= l at the end. Work is O(pos x HS) per
// query and head with O(HS) state. Parallel over (token, head); each output
// element is written by one thread in a fixed order (positions ascending).
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"

namespace ladder {
namespace {

constexpr char kWrite[] = "KvCacheWrite";
constexpr char kAttn[] = "PagedAttentionForward";
constexpr int64_t kBlock = 16;  // tokens per cache block (src/serve/kv_blocks.h)

}  // namespace

absl::Status CpuBackend::KvCacheWrite(Tensor k_cache, Tensor v_cache, Tensor qkv, Tensor slots) {
  int64_t S = 0, C = 0, N = 0, C3 = 0;
  RETURN_IF_ERROR(cpu::RowView(kWrite, "k_cache", k_cache, DType::kF32, &S, &C));
  RETURN_IF_ERROR(cpu::CheckRows(kWrite, "v_cache", v_cache, DType::kF32, S, C));
  RETURN_IF_ERROR(cpu::RowView(kWrite, "qkv", qkv, DType::kF32, &N, &C3));
  if (C3 != 3 * C) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWrite, ": qkv has ", C3, " columns, expected 3 x ", C));
  }
  RETURN_IF_ERROR(cpu::CheckNumel(kWrite, "slots", slots, DType::kI32, N));
  const int32_t* slot = slots.i32();
  for (int64_t n = 0; n < N; ++n) {
    if (slot[n] < 0 || slot[n] >= S) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWrite, ": slot ", slot[n], " of token ", n, " outside [0, ", S, ")"));
    }
  }
  const float* in = qkv.f32();
  for (int64_t n = 0; n < N; ++n) {
    std::copy(in + n * C3 + C, in + n * C3 + 2 * C, k_cache.f32() + slot[n] * C);
    std::copy(in + n * C3 + 2 * C, in + n * C3 + 3 * C, v_cache.f32() + slot[n] * C);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::PagedAttentionForward(Tensor out, Tensor qkv, Tensor k_cache,
                                               Tensor v_cache, Tensor block_tables, Tensor seq,
                                               Tensor pos, int num_heads) {
  int64_t S = 0, C = 0, N = 0, C3 = 0, num_seqs = 0, max_blocks = 0;
  RETURN_IF_ERROR(cpu::RowView(kAttn, "k_cache", k_cache, DType::kF32, &S, &C));
  RETURN_IF_ERROR(cpu::CheckRows(kAttn, "v_cache", v_cache, DType::kF32, S, C));
  RETURN_IF_ERROR(cpu::RowView(kAttn, "qkv", qkv, DType::kF32, &N, &C3));
  RETURN_IF_ERROR(cpu::CheckRows(kAttn, "out", out, DType::kF32, N, C));
  RETURN_IF_ERROR(
      cpu::RowView(kAttn, "block_tables", block_tables, DType::kI32, &num_seqs, &max_blocks));
  RETURN_IF_ERROR(cpu::CheckNumel(kAttn, "seq", seq, DType::kI32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kAttn, "pos", pos, DType::kI32, N));
  if (C3 != 3 * C || num_heads <= 0 || C % num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kAttn, ": qkv has ", C3, " columns for ",
                                                   num_heads, " heads of a width-", C, " cache"));
  }
  // Every index is checked before any is used.
  const int32_t* tables = block_tables.i32();
  for (int64_t n = 0; n < N; ++n) {
    const int32_t s = seq.i32()[n], p = pos.i32()[n];
    if (s < 0 || s >= num_seqs || p < 0 || p / kBlock >= max_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(kAttn, ": token ", n, " has sequence ", s,
                                                     " position ", p, " outside the tables"));
    }
    for (int64_t b = 0; b <= p / kBlock; ++b) {
      const int32_t block = tables[s * max_blocks + b];
      if (block < 0 || (int64_t{block} + 1) * kBlock > S) {
        return absl::InvalidArgumentError(
            absl::StrCat(kAttn, ": sequence ", s, " maps to block ", block, " outside the cache"));
      }
    }
  }
  const int64_t HS = C / num_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const float* K = k_cache.f32();
  const float* V = v_cache.f32();
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t job = 0; job < N * num_heads; ++job) {
    const int64_t n = job / num_heads, h = job % num_heads;
    const int32_t s = seq.i32()[n], p_last = pos.i32()[n];
    const float* q = qkv.f32() + n * C3 + h * HS;
    float* o = out.f32() + n * C + h * HS;
    for (int64_t d = 0; d < HS; ++d) o[d] = 0.0f;
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    for (int64_t p = 0; p <= p_last; ++p) {
      const int64_t row = tables[s * max_blocks + p / kBlock] * kBlock + p % kBlock;
      const float* k = K + row * C + h * HS;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < HS; ++d) dot += q[d] * k[d];
      const float score = dot * scale;
      if (score > m) {
        const float correction = std::exp(m - score);  // 0 on the first position
        l *= correction;
        for (int64_t d = 0; d < HS; ++d) o[d] *= correction;
        m = score;
      }
      const float e = std::exp(score - m);
      l += e;
      const float* v = V + row * C + h * HS;
#pragma omp simd
      for (int64_t d = 0; d < HS; ++d) o[d] += e * v[d];
    }
    const float inv = 1.0f / l;
    for (int64_t d = 0; d < HS; ++d) o[d] *= inv;
  }
  return absl::OkStatus();
}

}  // namespace ladder
