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
// running sum l of exp(s_p - m) and the output sum exp(s_p - m) v_p. Work
// is O(pos x HS) per query and head with O(HS) state.
//
// Split-K (flash-decoding), as kernels/paged_attention.cu does it: the
// positions are cut into splits of kSplitBlocks cache blocks (128
// positions); the loop above runs over one split at a time from a fresh
// state and leaves a partial (m_j, l_j, unnormalized o_j) per head; then the
// splits merge by their log-sum-exp: M = max m_j, w_j = exp(m_j - M),
// L = sum l_j w_j, O = (sum o_j w_j) / L, splits in increasing order. (A
// token of one split gets w = 1: O = o / l.) The splits are fixed by
// position, never chosen from the batch or the thread count, so a token's
// output depends only on its own sequence, bit for bit.
//
// Parallelism. A job always takes all heads of the rows it reads, so each
// cached row is one contiguous run of 4C bytes (k), then again (v), which
// the hardware prefetcher streams; a job that took a few heads would read
// short runs with gaps, each a fresh memory latency, and measured about 4x
// slower per byte. With many query tokens (a prefill chunk, a large batch)
// a job is a token: its splits in order, the partials in the thread's own
// scratch, then the merge. With few (a small decode batch, where a job per
// token would leave threads idle) a job is a (token, split), the partials
// in scratch shared by the call, and the merges follow as a second loop.
// Both run the same two functions on the same partials: the same bits.
//
// The int8 cache's two inner loops, q . k_p and o += e_p v_p, widen 8 or 16
// int8 values at a time to f32 and FMA them (paged_attention-inl.h, one
// source for AVX2 and AVX-512, simd.h; cpu_isa.h picks the level per call);
// the row's scale is applied once per position, outside the loops.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/simd.h"
#include "src/backend/quantize.h"

namespace ladder {
namespace {

constexpr char kWrite[] = "KvCacheWrite";
constexpr char kAttn[] = "PagedAttentionForward";
constexpr int64_t kBlock = 16;  // tokens per cache block (src/serve/kv_blocks.h)
// Cache blocks per split (kernels/paged_attention.h's kPagedSplitBlocks).
constexpr int64_t kSplitBlocks = 8;

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

// ---- int8 inner loops -----------------------------------------------------
// DotI8: sum_d q[d] * k[d].  AxpyI8: o[d] += a * v[d].  (n = HS values.)
// The portable loops are the reference; paged_attention-inl.h is the same
// per SIMD level.

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

#define LADDER_SIMD_KERNELS "src/backend/cpu/paged_attention-inl.h"
#include "src/backend/cpu/foreach_simd_level.h"

struct Int8Loops {
  float (*dot)(const float* q, const int8_t* k, int64_t n);
  void (*axpy)(float a, const int8_t* v, float* o, int64_t n);
};

Int8Loops Int8LoopsFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return {&avx512::Dot, &avx512::Axpy};
    case CpuIsa::kAvx2:
      return {&avx2::Dot, &avx2::Axpy};
    case CpuIsa::kPortable:
      break;
  }
  return {&DotI8Portable, &AxpyI8Portable};
}

// One PagedAttentionForward call's inputs, and its two steps.
struct PagedPass {
  const PagedKv& cache;
  const float* qkv;  // [N, 3C]
  const int32_t* tables;
  int64_t max_blocks, C, NH, HS;
  float scale;  // 1 / sqrt(HS)
  Int8Loops i8;

  // Split j (positions [128 j, min(128 j + 128, p_last + 1))) of token n,
  // sequence s: the partial dst = o [C], m [NH], l [NH], every head.
  // scores: NH x kBlock floats of the thread's.
  void Split(int64_t n, int32_t s, int32_t p_last, int64_t j, float* scores, float* dst) const {
    // Locals, so that the stores below cannot be taken to change them.
    const int64_t C = this->C, NH = this->NH, HS = this->HS;
    const float scale = this->scale;
    const bool int8 = cache.int8();
    const float* q = qkv + n * 3 * C;
    float* o = dst;
    float* m = dst + C;
    float* l = m + NH;
    std::fill(o, o + C, 0.0f);
    std::fill(m, m + NH, -std::numeric_limits<float>::infinity());
    std::fill(l, l + NH, 0.0f);
    const int64_t end = std::min<int64_t>((j + 1) * kSplitBlocks * kBlock, p_last + 1);
    // A cache block (16 positions, contiguous rows) at a time: its scores
    // first (independent dot products, a row's heads side by side), then
    // per head one rescale of o if the block raised its max, then the
    // values, row by row.
    for (int64_t first = j * kSplitBlocks * kBlock; first < end; first += kBlock) {
      const int64_t count = std::min<int64_t>(kBlock, end - first);
      const int64_t row0 = int64_t{tables[s * max_blocks + first / kBlock]} * kBlock;
      for (int64_t r = 0; r < count; ++r) {
        const int64_t row = row0 + r;
        for (int64_t h = 0; h < NH; ++h) {
          float dot = 0.0f;
          if (int8) {
            dot = i8.dot(q + h * HS, cache.k.i8() + row * C + h * HS, HS) *
                  cache.k_scale.f32()[row * NH + h];
          } else {
            const float* k = cache.k.f32() + row * C + h * HS;
            const float* qh = q + h * HS;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < HS; ++d) dot += qh[d] * k[d];
          }
          scores[h * kBlock + r] = dot * scale;
        }
      }
      for (int64_t h = 0; h < NH; ++h) {
        float block_max = -std::numeric_limits<float>::infinity();
        for (int64_t r = 0; r < count; ++r) block_max = std::max(block_max, scores[h * kBlock + r]);
        if (block_max > m[h]) {
          const float correction = std::exp(m[h] - block_max);  // 0 on the first block
          l[h] *= correction;
          for (int64_t d = 0; d < HS; ++d) o[h * HS + d] *= correction;
          m[h] = block_max;
        }
      }
      for (int64_t r = 0; r < count; ++r) {
        const int64_t row = row0 + r;
        for (int64_t h = 0; h < NH; ++h) {
          const float e = std::exp(scores[h * kBlock + r] - m[h]);
          l[h] += e;
          float* oh = o + h * HS;
          if (int8) {
            i8.axpy(e * cache.v_scale.f32()[row * NH + h], cache.v.i8() + row * C + h * HS, oh, HS);
          } else {
            const float* v = cache.v.f32() + row * C + h * HS;
#pragma omp simd
            for (int64_t d = 0; d < HS; ++d) oh[d] += e * v[d];
          }
        }
      }
    }
  }

  // out [C] = the merge of a token's `splits` partials (consecutive, each
  // C + 2 NH floats), in increasing order.
  void Merge(const float* partials, int64_t splits, float* out) const {
    const int64_t stride = C + 2 * NH;
    for (int64_t h = 0; h < NH; ++h) {
      float M = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < splits; ++j) M = std::max(M, partials[j * stride + C + h]);
      float L = 0.0f;
      float* oh = out + h * HS;
      std::fill(oh, oh + HS, 0.0f);
      for (int64_t j = 0; j < splits; ++j) {
        const float* part = partials + j * stride;
        const float w = std::exp(part[C + h] - M);
        L += part[C + NH + h] * w;
        for (int64_t d = 0; d < HS; ++d) oh[d] += part[h * HS + d] * w;
      }
      const float inv = 1.0f / L;
      for (int64_t d = 0; d < HS; ++d) oh[d] *= inv;
    }
  }
};

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
  const PagedPass pass{.cache = cache,
                       .qkv = qkv.f32(),
                       .tables = tables,
                       .max_blocks = max_blocks,
                       .C = C,
                       .NH = num_heads,
                       .HS = HS,
                       .scale = 1.0f / std::sqrt(static_cast<float>(HS)),
                       .i8 = Int8LoopsFor(ActiveCpuIsa())};
  const int32_t* seqs = seq.i32();
  const int32_t* positions = pos.i32();
  float* o = out.f32();
  const int64_t per_split = C + 2 * num_heads;  // a partial: o [C], m [NH], l [NH]
  auto splits_of = [&](int64_t n) { return positions[n] / (kSplitBlocks * kBlock) + 1; };
  const int64_t threads = omp_get_max_threads();
  if (N >= 4 * threads) {
    // A job per token, its partials in the thread's scratch.
    const int64_t most = (max_blocks + kSplitBlocks - 1) / kSplitBlocks;
#pragma omp parallel
    {
      std::vector<float> partials(static_cast<size_t>(most * per_split)),
          scores(static_cast<size_t>(num_heads * kBlock));
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t splits = splits_of(n);
        for (int64_t j = 0; j < splits; ++j) {
          pass.Split(n, seqs[n], positions[n], j, scores.data(), &partials[j * per_split]);
        }
        pass.Merge(partials.data(), splits, o + n * C);
      }
    }
    return absl::OkStatus();
  }
  // A job per (token, split), the partials in the call's scratch; then the
  // merges.
  std::vector<int64_t> first(static_cast<size_t>(N + 1), 0);  // token n's first job
  for (int64_t n = 0; n < N; ++n) first[n + 1] = first[n] + splits_of(n);
  const int64_t jobs = first[N];
  std::vector<float> partials(static_cast<size_t>(jobs * per_split));
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(num_heads * kBlock));
#pragma omp for schedule(dynamic, 1)
    for (int64_t job = 0; job < jobs; ++job) {
      const int64_t n = std::upper_bound(first.begin(), first.end(), job) - first.begin() - 1;
      pass.Split(n, seqs[n], positions[n], job - first[n], scores.data(),
                 &partials[job * per_split]);
    }
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pass.Merge(&partials[first[n] * per_split], first[n + 1] - first[n], o + n * C);
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
