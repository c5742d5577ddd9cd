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
// the flash variant, a cache block of 16 positions at a time: the block's
// scores s_p = q . k_p / sqrt(HS) (16 independent dot products, which the
// core overlaps), the running max m raised to the block's max (rescaling
// the output once per block rather than at every new maximum), then the
// running sum l of exp(s_p - m) and the output sum exp(s_p - m) v_p;
// O /= l at the end. Work is O(pos x HS) per query and head with O(HS)
// state. Parallel over jobs of a token and a group of its heads, taken as
// threads free up: the group is as many heads as still leave about 4 jobs
// per thread, so that a job reads its heads' slices of a cached row as one
// contiguous run (the hardware prefetcher streams it; one head's slice alone
// is a short run per row, each a fresh memory latency). Each output element
// is written by one thread in a fixed order (positions ascending), whatever
// the grouping, so it does not depend on the batch or the thread count.
//
// The int8 cache's two inner loops, q . k_p and o += e_p v_p, widen 8 or 16
// int8 values at a time to f32 and FMA them (AVX2, AVX-512; cpu_isa.h picks
// the level per call, the remainder of HS runs as scalars); the row's scale
// is applied once per position, outside the loops.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/quantize.h"

namespace ladder {
namespace {

constexpr char kWrite[] = "KvCacheWrite";
constexpr char kAttn[] = "PagedAttentionForward";
constexpr int64_t kBlock = 16;  // tokens per cache block (src/serve/kv_blocks.h)

// The cache's format and shape: S rows of C channels, k and v alike, and for
// int8 the [S, NH] scales.
absl::Status CheckCache(absl::string_view op, const PagedKv& c, int num_heads, int64_t* S,
                        int64_t* C) {
  const DType dt = c.int8() ? DType::kI8 : DType::kF32;
  RETURN_IF_ERROR(cpu::RowView(op, "k cache", c.k, dt, S, C));
  RETURN_IF_ERROR(cpu::CheckRows(op, "v cache", c.v, dt, *S, *C));
  if (num_heads <= 0 || *C % num_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", num_heads, " heads do not divide the cache width ", *C));
  }
  if (c.int8()) {
    RETURN_IF_ERROR(cpu::CheckRows(op, "k scales", c.k_scale, DType::kF32, *S, num_heads));
    RETURN_IF_ERROR(cpu::CheckRows(op, "v scales", c.v_scale, DType::kF32, *S, num_heads));
  } else if (!c.v_scale.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": v scales given for an fp32 cache"));
  }
  return absl::OkStatus();
}

// Stores n values of one head into a cache row: copied, or quantized with
// the row's scale.
void StoreHead(const float* x, int64_t n, const PagedKv& c, bool is_k, int64_t row, int64_t C,
               int64_t head, int num_heads) {
  const Tensor& t = is_k ? c.k : c.v;
  if (!c.int8()) {
    std::copy(x, x + n, t.f32() + row * C + head * n);
    return;
  }
  const float scale = QuantizeSymmetric(x, n, t.i8() + row * C + head * n);
  (is_k ? c.k_scale : c.v_scale).f32()[row * num_heads + head] = scale;
}

// ---- int8 inner loops, one per ISA level ------------------------------------
// DotI8: sum_d q[d] * k[d].  AxpyI8: o[d] += a * v[d].  (n = HS values.)

float DotI8Portable(const float* q, const int8_t* k, int64_t n) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t d = 0; d < n; ++d) dot += q[d] * static_cast<float>(k[d]);
  return dot;
}

void AxpyI8Portable(float a, const int8_t* v, float* o, int64_t n) {
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) o[d] += a * static_cast<float>(v[d]);
}

LADDER_TARGET_AVX2 float DotI8Avx2(const float* q, const int8_t* k, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), WidenAvx2(k + d), acc);
  float dot = SumAvx2(acc);
  for (; d < n; ++d) dot += q[d] * static_cast<float>(k[d]);
  return dot;
}

LADDER_TARGET_AVX2 void AxpyI8Avx2(float a, const int8_t* v, float* o, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    _mm256_storeu_ps(o + d, _mm256_fmadd_ps(av, WidenAvx2(v + d), _mm256_loadu_ps(o + d)));
  }
  for (; d < n; ++d) o[d] += a * static_cast<float>(v[d]);
}

LADDER_AVX512_BEGIN

LADDER_TARGET_AVX512 float DotI8Avx512(const float* q, const int8_t* k, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), WidenAvx512(k + d), acc);
  }
  float dot = SumAvx512(acc);
  for (; d < n; ++d) dot += q[d] * static_cast<float>(k[d]);
  return dot;
}

LADDER_TARGET_AVX512 void AxpyI8Avx512(float a, const int8_t* v, float* o, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) {
    _mm512_storeu_ps(o + d, _mm512_fmadd_ps(av, WidenAvx512(v + d), _mm512_loadu_ps(o + d)));
  }
  for (; d < n; ++d) o[d] += a * static_cast<float>(v[d]);
}

LADDER_AVX512_END

struct Int8Loops {
  float (*dot)(const float* q, const int8_t* k, int64_t n);
  void (*axpy)(float a, const int8_t* v, float* o, int64_t n);
};

Int8Loops Int8LoopsFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return {&DotI8Avx512, &AxpyI8Avx512};
    case CpuIsa::kAvx2:
      return {&DotI8Avx2, &AxpyI8Avx2};
    case CpuIsa::kPortable:
      break;
  }
  return {&DotI8Portable, &AxpyI8Portable};
}

}  // namespace

absl::Status CpuBackend::KvCacheWrite(const PagedKv& cache, Tensor qkv, Tensor slots,
                                      int num_heads) {
  int64_t S = 0, C = 0, N = 0, C3 = 0;
  RETURN_IF_ERROR(CheckCache(kWrite, cache, num_heads, &S, &C));
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
  const int64_t HS = C / num_heads;
  const float* in = qkv.f32();
  // Tokens write disjoint rows: a prefill's chunk is split over the threads,
  // a decode step's few tokens stay on this one.
#pragma omp parallel for schedule(static) if (N * C >= cpu::kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < num_heads; ++h) {
      StoreHead(in + n * C3 + C + h * HS, HS, cache, true, slot[n], C, h, num_heads);
      StoreHead(in + n * C3 + 2 * C + h * HS, HS, cache, false, slot[n], C, h, num_heads);
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                               Tensor block_tables, Tensor seq, Tensor pos,
                                               int num_heads) {
  int64_t S = 0, C = 0, N = 0, C3 = 0, num_seqs = 0, max_blocks = 0;
  RETURN_IF_ERROR(CheckCache(kAttn, cache, num_heads, &S, &C));
  RETURN_IF_ERROR(cpu::RowView(kAttn, "qkv", qkv, DType::kF32, &N, &C3));
  RETURN_IF_ERROR(cpu::CheckRows(kAttn, "out", out, DType::kF32, N, C));
  RETURN_IF_ERROR(
      cpu::RowView(kAttn, "block_tables", block_tables, DType::kI32, &num_seqs, &max_blocks));
  RETURN_IF_ERROR(cpu::CheckNumel(kAttn, "seq", seq, DType::kI32, N));
  RETURN_IF_ERROR(cpu::CheckNumel(kAttn, "pos", pos, DType::kI32, N));
  if (C3 != 3 * C) {
    return absl::InvalidArgumentError(
        absl::StrCat(kAttn, ": qkv has ", C3, " columns, expected 3 x ", C));
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
  const bool int8 = cache.int8();
  const Int8Loops i8 = Int8LoopsFor(ActiveCpuIsa());
  // Jobs (top of the file): token n and heads [h0, h0 + per), per chosen
  // for about 4 jobs a thread. At batch 8 on 2 threads a job is all 12 heads
  // of GPT-2 124M, 3 KiB of each cached row in one run.
  const int64_t threads = omp_get_max_threads();
  const int64_t want = std::clamp<int64_t>((4 * threads + N - 1) / N, 1, num_heads);
  const int64_t per = (num_heads + want - 1) / want;   // heads per job
  const int64_t groups = (num_heads + per - 1) / per;  // the last may have fewer
#pragma omp parallel
  {
    // Per head of the job: running max and sum, and one block's scores.
    std::vector<float> m(static_cast<size_t>(per)), l(static_cast<size_t>(per)),
        scores(static_cast<size_t>(per * kBlock));
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < N * groups; ++job) {
      const int64_t n = job / groups, h0 = job % groups * per;
      const int64_t heads = std::min(per, num_heads - h0);
      const int32_t s = seq.i32()[n], p_last = pos.i32()[n];
      const float* q = qkv.f32() + n * C3 + h0 * HS;  // head h0 + g at q + g * HS
      float* o = out.f32() + n * C + h0 * HS;
      std::fill(o, o + heads * HS, 0.0f);
      std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
      std::fill(l.begin(), l.end(), 0.0f);
      // A cache block (16 positions, contiguous rows) at a time: its scores
      // first (independent dot products, a row's heads side by side), then
      // per head one rescale of o if the block raised its max, then the
      // values, row by row.
      for (int64_t first = 0; first <= p_last; first += kBlock) {
        const int64_t count = std::min<int64_t>(kBlock, p_last + 1 - first);
        const int64_t row0 = int64_t{tables[s * max_blocks + first / kBlock]} * kBlock;
        for (int64_t j = 0; j < count; ++j) {
          const int64_t row = row0 + j;
          for (int64_t g = 0; g < heads; ++g) {
            const int64_t h = h0 + g;
            float dot = 0.0f;
            if (int8) {
              dot = i8.dot(q + g * HS, cache.k.i8() + row * C + h * HS, HS) *
                    cache.k_scale.f32()[row * num_heads + h];
            } else {
              const float* k = cache.k.f32() + row * C + h * HS;
              const float* qg = q + g * HS;
#pragma omp simd reduction(+ : dot)
              for (int64_t d = 0; d < HS; ++d) dot += qg[d] * k[d];
            }
            scores[g * kBlock + j] = dot * scale;
          }
        }
        for (int64_t g = 0; g < heads; ++g) {
          float block_max = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < count; ++j)
            block_max = std::max(block_max, scores[g * kBlock + j]);
          if (block_max > m[g]) {
            const float correction = std::exp(m[g] - block_max);  // 0 on the first block
            l[g] *= correction;
            for (int64_t d = 0; d < HS; ++d) o[g * HS + d] *= correction;
            m[g] = block_max;
          }
        }
        for (int64_t j = 0; j < count; ++j) {
          const int64_t row = row0 + j;
          for (int64_t g = 0; g < heads; ++g) {
            const int64_t h = h0 + g;
            const float e = std::exp(scores[g * kBlock + j] - m[g]);
            l[g] += e;
            float* og = o + g * HS;
            if (int8) {
              i8.axpy(e * cache.v_scale.f32()[row * num_heads + h], cache.v.i8() + row * C + h * HS,
                      og, HS);
            } else {
              const float* v = cache.v.f32() + row * C + h * HS;
#pragma omp simd
              for (int64_t d = 0; d < HS; ++d) og[d] += e * v[d];
            }
          }
        }
      }
      for (int64_t g = 0; g < heads; ++g) {
        const float inv = 1.0f / l[g];
        for (int64_t d = 0; d < HS; ++d) o[g * HS + d] *= inv;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
