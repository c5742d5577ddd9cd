// Causal multi-head self-attention on the CPU, in two variants, and attention
// by positions (context parallelism's ring steps).
//
// Per (batch b, head h), with Q, K, V the [T, HS] slices of qkv and
// scale = 1/sqrt(HS):
//     S = scale * Q K^T           (T x T scores; S[i,j] masked to -inf for j > i)
//     P = softmax(S) row by row   (lse[i] = log sum_j exp(S[i,j]) is saved)
//     O = P V
//
// kNaive does exactly that: it writes the T x T scores of every (b,h) to
// `scratch`, turns them into probabilities in place, then multiplies by V.
// It is the teaching variant and the reference the fast one is tested
// against, but it needs O(T^2) memory and streams the T x T matrix through
// memory three times.
//
// kFlash (the default) fuses the three steps, as FlashAttention does. Queries
// are taken a tile of kTile rows at a time; for each query tile we walk the key
// tiles up to the diagonal, computing a kTile x kTile block of S (in cache),
// exponentiating it and immediately multiplying it into the output. The softmax
// normaliser is not known until the last key tile, so we keep an *online
// softmax*: a running row max m and running sum l = sum exp(S - m). When a new
// tile raises the max from m to m', everything accumulated so far was scaled
// by exp(-m) instead of exp(-m'), so we multiply l and the output accumulator
// by exp(m - m') and carry on. At the end O /= l and lse = m + log(l). One pass,
// nothing T x T in memory: O(T) extra state per head, and each block of S lives
// in L1/L2 from the moment it is computed until it has been used.
//
// The backward (FlashAttention-2) recomputes P = exp(S - lse) tile by tile from
// Q, K and the saved lse instead of storing it, so it too is O(T) in memory:
//     D[i]  = sum_d dO[i,d] O[i,d]         (= sum_j P[i,j] dP[i,j])
//     dV   += P^T dO          dP = dO V^T
//     dS    = P * (dP - D)    (softmax backward, elementwise)
//     dQ   += scale * dS K    dK += scale * dS^T Q
//
// By positions (AttentionPartForward/Backward, one block of context
// parallelism's ring): the kFlash loops over Tq queries of one tensor and Tk
// keys of another, where query i sees key j iff k_pos[j] <= q_pos[i]. Each
// pair of a query tile and a key tile is classified by the tiles' position
// ranges: no pair allowed (skipped, no work at all: about half of the tile
// pairs of a ring step), every pair allowed (no mask), or masked pair by
// pair. The forward merges its result into the partial one the outputs hold
// by log-sum-exp; the backward adds into the gradients.
//
// Speed: the block products are small (64 x 64 x HS) and many; a BLAS call
// would repack both operands every time, costing about as much as the
// arithmetic. So one register-blocked kernel (Gemm below) does all five
// products on operands laid out once per head, at close to the machine's
// sgemm rate, and the per-score work (max, exp, masks) uses 8-lane vectors.
// Parallelism is over (b, h).
//
// Determinism: every output element is written by exactly one thread and
// accumulated in a fixed order (key tiles ascending), so results do not depend
// on the number of threads or on the schedule.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_common.h"
#include "src/backend/shape_check.h"
#include "src/core/status.h"

namespace ladder {
namespace {

// Query and key tile size of the flash variant. 64 keeps a score block
// (16 KiB) and the Q/K/V tiles in L1/L2, and is large enough that the block
// GEMMs run near full speed.
constexpr int64_t kTile = 64;

using Dims = AttentionDims;

absl::Status CheckQkv(absl::string_view op, const Tensor& qkv, int num_heads, Dims* d) {
  return CheckAttentionQkv(Device::kCpu, op, qkv, DType::kF32, num_heads, d);
}

absl::Status CheckScratch(absl::string_view op, AttentionKind kind, const Tensor& scratch,
                          const Dims& d) {
  const int64_t need = AttentionScratchFloats(kind, d.B, d.T, d.NH);
  if (need == 0) return absl::OkStatus();
  if (scratch.empty() || scratch.dtype != DType::kF32 || scratch.numel() < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": scratch has shape ", scratch.ShapeString(), scratch.empty() ? " (empty)" : "",
        ", kNaive needs at least B*NH*T*T = ", need, " f32"));
  }
  return cpu::CheckCpu(op, "scratch", scratch);
}

// ---------------------------------------------------------------------------
// kNaive: plain loops over the materialized T x T matrix of each (b, h).
// ---------------------------------------------------------------------------

void NaiveForward(float* out, float* lse, const float* qkv, float* scratch, const Dims& d) {
  const int64_t T = d.T, C = d.C, HS = d.HS, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const float* base = qkv + b * T * C3 + h * HS;  // q of token 0; k at +C, v at +2C
    float* att = scratch + bh * T * T;
    for (int64_t i = 0; i < T; ++i) {
      const float* q = base + i * C3;
      float* row = att + i * T;
      // scores of the keys this query may see (j <= i), and their max
      float maxv = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j <= i; ++j) {
        const float* k = base + j * C3 + C;
        float dot = 0.0f;
        for (int64_t c = 0; c < HS; ++c) dot += q[c] * k[c];
        row[j] = dot * scale;
        maxv = std::max(maxv, row[j]);
      }
      // softmax in place (subtracting the max keeps exp in range)
      float sum = 0.0f;
      for (int64_t j = 0; j <= i; ++j) {
        row[j] = std::exp(row[j] - maxv);
        sum += row[j];
      }
      for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;  // the causal mask
      lse[bh * T + i] = maxv + std::log(sum);
      const float inv = 1.0f / sum;
      // out = P @ V
      float* o = out + (b * T + i) * C + h * HS;
      for (int64_t c = 0; c < HS; ++c) o[c] = 0.0f;
      for (int64_t j = 0; j <= i; ++j) {
        row[j] *= inv;
        const float* v = base + j * C3 + 2 * C;
        for (int64_t c = 0; c < HS; ++c) o[c] += row[j] * v[c];
      }
    }
  }
}

void NaiveBackward(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, float* scratch, const Dims& d) {
  const int64_t T = d.T, C = d.C, HS = d.HS, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const float* base = qkv + b * T * C3 + h * HS;
    float* dbase = dqkv + b * T * C3 + h * HS;
    float* att = scratch + bh * T * T;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < HS; ++c) {
        dbase[t * C3 + c] = dbase[t * C3 + C + c] = dbase[t * C3 + 2 * C + c] = 0.0f;
      }
    }
    // Recompute P = exp(S - lse) from the scores: no T x T state survives
    // between forward and backward.
    for (int64_t i = 0; i < T; ++i) {
      const float* q = base + i * C3;
      for (int64_t j = 0; j <= i; ++j) {
        const float* k = base + j * C3 + C;
        float dot = 0.0f;
        for (int64_t c = 0; c < HS; ++c) dot += q[c] * k[c];
        att[i * T + j] = std::exp(dot * scale - lse[bh * T + i]);
      }
    }
    for (int64_t i = 0; i < T; ++i) {
      const float* q = base + i * C3;
      const float* dO = dout + (b * T + i) * C + h * HS;
      const float* o = out + (b * T + i) * C + h * HS;
      float* dq = dbase + i * C3;
      // D = rowsum(dO * O), which equals sum_j P[i,j] dP[i,j]
      float D = 0.0f;
      for (int64_t c = 0; c < HS; ++c) D += dO[c] * o[c];
      for (int64_t j = 0; j <= i; ++j) {
        const float* k = base + j * C3 + C;
        const float* v = base + j * C3 + 2 * C;
        float* dk = dbase + j * C3 + C;
        float* dv = dbase + j * C3 + 2 * C;
        const float p = att[i * T + j];
        float dp = 0.0f;  // dP = dO V^T
        for (int64_t c = 0; c < HS; ++c) {
          dp += dO[c] * v[c];
          dv[c] += p * dO[c];  // dV = P^T dO
        }
        const float ds = p * (dp - D) * scale;  // softmax backward, times the score scale
        for (int64_t c = 0; c < HS; ++c) {
          dq[c] += ds * k[c];  // dQ = dS K
          dk[c] += ds * q[c];  // dK = dS^T Q
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// kFlash: tiles of kTile queries x kTile keys.
// ---------------------------------------------------------------------------

// The block products use one register-blocked kernel:
//     C[M,N] (+)= alpha * A[M,K] B[K,N]
// with B read a row at a time as 8-float vectors and A read an element at a
// time (broadcast), at any row/column stride. That one form covers all five
// products: A = Q, dO, P, dS or a transposed P/dS (just swapped strides);
// B = rows of V, K, Q or dO, or of K^T / V^T. Each 6 x 16 block of C lives in
// 12 AVX registers for the whole k loop: 2 vector loads and 6 broadcasts feed
// 12 FMAs, like the inner kernel of a BLAS (without its packing).
typedef float v8 __attribute__((vector_size(32)));  // GCC/Clang vector extension
#if defined(__GNUC__) && !defined(__clang__)
// Built without AVX (-Dnative=false), GCC warns that passing v8 by value has
// a different ABI there; these are all internal functions, so it cannot matter.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

inline v8 Load8(const float* p) {
  v8 v;
  __builtin_memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
inline void Store8(float* p, const v8& v) { __builtin_memcpy(p, &v, sizeof v); }

// ---- the softmax rows, 8 lanes at a time ----------------------------------
// Written with explicit vectors: this work is per score element, like the
// block products, and GCC leaves the masked loops scalar (several times
// slower). Rows are padded to a multiple of 16 floats.
typedef int32_t v8i __attribute__((vector_size(32)));
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline v8 Splat(float x) { return v8{} + x; }
// Lane mask: key k + j is valid (earlier than or at the query) iff k + j < nvalid.
inline v8i Valid(int64_t k, int64_t nvalid) {
  return v8i{0, 1, 2, 3, 4, 5, 6, 7} + static_cast<int32_t>(k) < static_cast<int32_t>(nvalid);
}

// exp(x) per lane: the same Cephes polynomial as cpu::ExpF (~1 ulp), with 2^n
// built in the exponent bits; below -87 gives 0, NaN stays NaN.
inline v8 Exp8(const v8& x) {
  const v8i under = x < -87.0f;
  v8 xc = under ? Splat(-87.0f) : x;
  xc = xc > 88.0f ? Splat(88.0f) : xc;
  return under ? Splat(0.0f) : cpu::ExpInRange<v8, v8i>(xc);
}

// Max of s[k] over the valid keys k < nvalid.
inline float RowMax(const float* s, int64_t nvalid) {
  v8 mx = Splat(kNegInf);
  for (int64_t k = 0; k < nvalid; k += 8) {
    const v8 x = Load8(s + k);
    mx = Valid(k, nvalid) && x > mx ? x : mx;
  }
  float m = mx[0];
  for (int j = 1; j < 8; ++j) m = std::max(m, mx[j]);
  return m;
}

// s[k] = exp(s[k] - sub) for k < nvalid and 0 for nvalid <= k < n (n a
// multiple of 8); returns the row sum (lanes added in a fixed order). Only the
// 8-lane groups that hold valid keys pay for the exp: on a diagonal tile that
// is half of them.
inline float RowExp(float* s, int64_t n, int64_t nvalid, float sub) {
  v8 sum{};
  int64_t k = 0;
  for (; k < nvalid; k += 8) {
    const v8 e = Valid(k, nvalid) ? Exp8(Load8(s + k) - sub) : v8{};
    Store8(s + k, e);
    sum += e;
  }
  for (; k < n; k += 8) Store8(s + k, v8{});
  float total = 0.0f;
  for (int j = 0; j < 8; ++j) total += sum[j];
  return total;
}

// Where operand A points, and how to step through it.
struct MatA {
  const float* p;
  int64_t rs, cs;  // A(i, k) = p[i * rs + k * cs]
};

// One MR x (8*NV) block of C over k in [k0, k1).
template <int MR, int NV>
void Block(int64_t k0, int64_t k1, MatA a, const float* b, int64_t ldb, float* c, int64_t ldc,
           float alpha, bool accumulate) {
  v8 acc[MR][NV];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NV; ++j) acc[i][j] = v8{};
  }
  for (int64_t k = k0; k < k1; ++k) {
    v8 bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = Load8(b + k * ldb + 8 * j);
    for (int i = 0; i < MR; ++i) {
      const float av = a.p[i * a.rs + k * a.cs];
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NV; ++j) {
      v8 r = alpha * acc[i][j];
      if (accumulate) r += Load8(c + i * ldc + 8 * j);
      Store8(c + i * ldc + 8 * j, r);
    }
  }
}

template <int NV>
void BlockRows(int mr, int64_t k0, int64_t k1, MatA a, const float* b, int64_t ldb, float* c,
               int64_t ldc, float alpha, bool accumulate) {
  switch (mr) {
    case 6:
      return Block<6, NV>(k0, k1, a, b, ldb, c, ldc, alpha, accumulate);
    case 5:
      return Block<5, NV>(k0, k1, a, b, ldb, c, ldc, alpha, accumulate);
    case 4:
      return Block<4, NV>(k0, k1, a, b, ldb, c, ldc, alpha, accumulate);
    case 3:
      return Block<3, NV>(k0, k1, a, b, ldb, c, ldc, alpha, accumulate);
    case 2:
      return Block<2, NV>(k0, k1, a, b, ldb, c, ldc, alpha, accumulate);
    default:
      return Block<1, NV>(k0, k1, a, b, ldb, c, ldc, alpha, accumulate);
  }
}

// How the causal mask trims a block product. `off` = first query of the
// query tile - first key of the key tile (>= 0; >= kTile means no trimming).
enum class Causal {
  kNone,
  kColsToDiag,     // C rows are queries, columns keys: only columns <= row + off
  kInnerToDiag,    // C rows are queries, k runs over keys: only k <= row + off
  kInnerFromDiag,  // C rows are keys, k runs over queries: only k >= row - off
};

// A block of C is kMR rows x 8*kNV columns. With AVX, 6 x 16 takes 12 of the
// 16 ymm registers. Without it (-Dnative=false) each v8 is two xmm registers,
// so the block is 6 x 8, or the accumulators would spill to the stack.
constexpr int kMR = 6;
#ifdef __AVX__
constexpr int kNV = 2;
#else
constexpr int kNV = 1;
#endif

// C[M,N] = alpha * A B (+ C if accumulate). With a Causal trim, the work of a
// row block is limited to what the mask lets through; entries of C the trim
// skips are left unwritten (kColsToDiag: the caller never reads them) or get
// only the terms that can be nonzero (the others multiply a masked, zero P).
void Gemm(int64_t M, int64_t N, int64_t K, MatA a, const float* b, int64_t ldb, float* c,
          int64_t ldc, float alpha, bool accumulate, Causal causal = Causal::kNone,
          int64_t off = 0) {
  for (int64_t i = 0; i < M; i += kMR) {
    const int mr = static_cast<int>(std::min<int64_t>(kMR, M - i));
    int64_t n_end = N, k0 = 0, k1 = K;
    if (causal == Causal::kColsToDiag) n_end = std::min(N, i + mr + off);
    if (causal == Causal::kInnerToDiag) k1 = std::min(K, i + mr + off);
    if (causal == Causal::kInnerFromDiag) k0 = std::max<int64_t>(0, i - off);
    const MatA ai{a.p + i * a.rs, a.rs, a.cs};
    float* ci = c + i * ldc;
    int64_t j = 0;
    for (; j < n_end && N - j >= 8 * kNV; j += 8 * kNV) {
      BlockRows<kNV>(mr, k0, k1, ai, b + j, ldb, ci + j, ldc, alpha, accumulate);
    }
    if (j < n_end && N - j >= 8) {
      BlockRows<1>(mr, k0, k1, ai, b + j, ldb, ci + j, ldc, alpha, accumulate);
      j += 8;
    }
    for (; j < n_end; ++j) {  // fewer than 8 columns left (HS not a multiple of 8)
      for (int r = 0; r < mr; ++r) {
        float s = 0.0f;
        for (int64_t k = k0; k < k1; ++k) s += ai.p[r * a.rs + k * a.cs] * b[k * ldb + j];
        ci[r * ldc + j] = alpha * s + (accumulate ? ci[r * ldc + j] : 0.0f);
      }
    }
  }
}

// Copies a head's [T, HS] slice of a strided tensor (row stride ld) into a
// contiguous buffer, and back. On contiguous copies each block product's
// operands sit on a few pages (rows of qkv are 3C floats apart). The rows of a
// head are far apart, so the hardware prefetcher does not see a stream;
// asking for the row kAhead rows later keeps several misses in flight.
constexpr int64_t kAhead = 8;
// dst[0..n) = src[0..n), inline: rows are short (HS floats), so a memmove call
// per row would cost as much as the copy.
inline void CopyRow(float* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) Store8(dst + i, Load8(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}
void Gather(float* dst, const float* src, int64_t ld, int64_t T, int64_t HS) {
  for (int64_t t = 0; t < T; ++t) {
    if (t + kAhead < T) cpu::PrefetchRow(src + (t + kAhead) * ld, HS);
    CopyRow(dst + t * HS, src + t * ld, HS);
  }
}
void Scatter(float* dst, int64_t ld, const float* src, int64_t T, int64_t HS) {
  for (int64_t t = 0; t < T; ++t) {
    if (t + kAhead < T) cpu::PrefetchRowForWrite(dst + (t + kAhead) * ld, HS);
    CopyRow(dst + t * ld, src + t * HS, HS);
  }
}

// In-register transpose of an 8 x 8 block (the classic unpack / shuffle /
// 128-bit permute sequence, written with __builtin_shufflevector).
inline void Transpose8x8(v8 r[8]) {
  v8 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {  // interleave row pairs
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {  // gather 4-element column pieces
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {  // join the 128-bit halves
    r[i] = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[i + 4] = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// K^T (and V^T) of a head, one [HS, kTile] block per key tile:
//     dst[(t / kTile) * HS * kTile + d * kTile + t % kTile] = src[t * ld + d],
// zero for t >= T up to the next multiple of kTile. Blocking by tile (rather
// than one [HS, T] matrix) keeps the row stride at kTile floats: with a large
// power-of-two stride (T = 256, 512, ...) the 64 rows a block product walks
// would all fall into a few L1 cache sets and evict each other.
void TransposeTiles(float* dst, const float* src, int64_t ld, int64_t T, int64_t HS) {
  const int64_t Tp = (T + kTile - 1) / kTile * kTile;
  const int64_t HS8 = HS / 8 * 8;
  for (int64_t t0 = 0; t0 < Tp; t0 += 8) {  // 8 rows at a time (kTile is a multiple of 8)
    float* tile = dst + (t0 / kTile) * HS * kTile + t0 % kTile;
    for (int64_t i = 0; i < 8; ++i) {
      if (t0 + kAhead + i < T) cpu::PrefetchRow(src + (t0 + kAhead + i) * ld, HS);
    }
    for (int64_t d0 = 0; d0 < HS8; d0 += 8) {
      v8 r[8];
      for (int i = 0; i < 8; ++i) r[i] = t0 + i < T ? Load8(src + (t0 + i) * ld + d0) : v8{};
      Transpose8x8(r);
      for (int j = 0; j < 8; ++j) Store8(tile + (d0 + j) * kTile, r[j]);
    }
    for (int64_t d = HS8; d < HS; ++d) {  // HS not a multiple of 8
      for (int64_t i = 0; i < 8; ++i)
        tile[d * kTile + i] = t0 + i < T ? src[(t0 + i) * ld + d] : 0.0f;
    }
  }
}

inline int64_t RoundUp16(int64_t n) { return (n + 15) / 16 * 16; }

// One query row's step of the online softmax: folds the scores s[0..nvalid)
// of a new key tile into the row's running max *m and sum *l (of exp(s - *m)
// over the keys so far), and rescales the row's output accumulator o[0..HS)
// by exp(old max - new max) when the max rises. Leaves P = exp(s - *m) in s,
// 0 for the masked keys (scores of -inf) and from nvalid up to n, ready for
// O += P V. Before the row's first finite score *m is -inf and *l is 0, and
// o is not touched: it may hold anything until the caller's first P V.
inline void OnlineSoftmaxRow(float* s, int64_t n, int64_t nvalid, float* m, float* l, float* o,
                             int64_t HS) {
  const float mx = std::max(*m, RowMax(s, nvalid));
  if (mx == kNegInf) {  // no allowed key yet (a causal row always sees itself): P = 0
    std::fill(s, s + n, 0.0f);
    return;
  }
  const float sum = RowExp(s, n, nvalid, mx);
  if (*m == kNegInf) {
    *l = sum;
  } else {
    const float corr = std::exp(*m - mx);
    *l = *l * corr + sum;
#pragma omp simd
    for (int64_t c = 0; c < HS; ++c) o[c] *= corr;
  }
  *m = mx;
}

// D[t] = dO[t,:] . out[t,:] for t < T (the backward's rowsum(dO * O)), with
// dO a contiguous [T, HS] copy and out the head's slice of row stride ld.
void RowDots(float* D, const float* dO, const float* out, int64_t ld, int64_t T, int64_t HS) {
  for (int64_t t = 0; t < T; ++t) {
    const float* go = dO + t * HS;
    const float* o = out + t * ld;
    if (t + kAhead < T) cpu::PrefetchRow(o + kAhead * ld, HS);
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t c = 0; c < HS; ++c) acc += go[c] * o[c];
    D[t] = acc;
  }
}

// The softmax backward of one row, in place: p[k] = p[k] * (dp[k] - D) for
// the keys k < nvalid; beyond nvalid P is already 0 (RowExp), and so is dS.
inline void SoftmaxGradRow(float* p, const float* dp, float D, int64_t nvalid) {
  for (int64_t k = 0; k < nvalid; k += 8) {
    const v8 ds = Load8(p + k) * (Load8(dp + k) - D);
    Store8(p + k, Valid(k, nvalid) ? ds : v8{});
  }
}

// Work is split over (b, h): each thread owns whole heads, so it gathers a
// head's Q, K, V once for all its tiles, and (in the backward) owns all of the
// head's dQ, dK, dV, accumulating them in a fixed order with no atomics.
// B*NH is many times the core count for the models trained here.
void FlashForward(float* out, float* lse, const float* qkv, const Dims& d) {
  const int64_t T = d.T, C = d.C, HS = d.HS, C3 = 3 * C, BH = d.B * d.NH;
  const int64_t Tp = (T + kTile - 1) / kTile * kTile;  // key count padded to whole tiles
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const float* base = qkv + b * T * C3 + h * HS;  // q of token 0; k at +C, v at +2C
    float* Q = cpu::ScratchFloats(2 * T * HS + HS * Tp + kTile * HS + kTile * kTile + 2 * kTile);
    float* V = Q + T * HS;         // [T, HS]
    float* KT = V + T * HS;        // K transposed, by tiles (TransposeTiles)
    float* O = KT + HS * Tp;       // output accumulator of one query tile, [kTile, HS]
    float* S = O + kTile * HS;     // one score block, then P in place
    float* m = S + kTile * kTile;  // running row max
    float* l = m + kTile;          // running sum of exp(S - m)
    Gather(Q, base, C3, T, HS);
    Gather(V, base + 2 * C, C3, T, HS);
    TransposeTiles(KT, base + C, C3, T, HS);

    for (int64_t i0 = 0; i0 < T; i0 += kTile) {
      const int64_t nq = std::min(kTile, T - i0);
      std::fill(m, m + nq, kNegInf);
      std::fill(l, l + nq, 0.0f);
      // key tiles up to and including the diagonal one
      for (int64_t j0 = 0; j0 < i0 + nq; j0 += kTile) {
        const int64_t nk = std::min(kTile, i0 + nq - j0), nkp = RoundUp16(nk), off = i0 - j0;
        // S = scale * Q K^T for this block
        Gemm(nq, nkp, HS, {Q + i0 * HS, HS, 1}, KT + j0 * HS, kTile, S, kTile, scale, false,
             Causal::kColsToDiag, off);
        // Online softmax, row by row: update the max, exponentiate, rescale.
        // Masked keys (k >= nvalid, later than the query) get P = 0.
        for (int64_t r = 0; r < nq; ++r) {
          const int64_t nvalid = std::min(nk, r + off + 1);  // causal: keys <= query
          OnlineSoftmaxRow(S + r * kTile, nkp, nvalid, &m[r], &l[r], O + r * HS, HS);
        }
        // O += P V (the first key tile initializes O)
        Gemm(nq, HS, nk, {S, kTile, 1}, V + j0 * HS, HS, O, HS, 1.0f, j0 > 0, Causal::kInnerToDiag,
             off);
      }
      // out = O / l;  lse = m + log(l)
      for (int64_t r = 0; r < nq; ++r) {
        const float inv = 1.0f / l[r];
        const float* o = O + r * HS;
        float* dst = out + (b * T + i0 + r) * C + h * HS;
        if (r + kAhead < nq) cpu::PrefetchRowForWrite(dst + kAhead * C, HS);
#pragma omp simd
        for (int64_t c = 0; c < HS; ++c) dst[c] = o[c] * inv;
        lse[bh * T + i0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

void FlashBackward(float* dqkv, const float* dout, const float* qkv, const float* out,
                   const float* lse, const Dims& d) {
  const int64_t T = d.T, C = d.C, HS = d.HS, C3 = 3 * C, BH = d.B * d.NH;
  const int64_t Tp = (T + kTile - 1) / kTile * kTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const float* base = qkv + b * T * C3 + h * HS;
    const float* L = lse + bh * T;
    // Contiguous [T, HS] copies of Q, K, dO and the dQ, dK, dV accumulators;
    // K and V also transposed by tiles; two score blocks; D.
    float* Q = cpu::ScratchFloats(6 * T * HS + 2 * HS * Tp + 2 * kTile * kTile + T);
    float* K = Q + T * HS;
    float* dO = K + T * HS;
    float* dQ = dO + T * HS;
    float* dK = dQ + T * HS;
    float* dV = dK + T * HS;
    float* KT = dV + T * HS;
    float* VT = KT + HS * Tp;
    float* P = VT + HS * Tp;  // P, then dS in place
    float* dP = P + kTile * kTile;
    float* D = dP + kTile * kTile;
    Gather(Q, base, C3, T, HS);
    Gather(K, base + C, C3, T, HS);
    Gather(dO, dout + b * T * C + h * HS, C, T, HS);
    TransposeTiles(KT, K, HS, T, HS);
    TransposeTiles(VT, base + 2 * C, C3, T, HS);
    std::fill(dQ, dQ + 3 * T * HS, 0.0f);
    RowDots(D, dO, out + b * T * C + h * HS, C, T, HS);

    // Key tiles outside: dK and dV of a tile accumulate over the query tiles
    // at or below the diagonal; dQ of each query tile accumulates over key
    // tiles in increasing order.
    for (int64_t j0 = 0; j0 < T; j0 += kTile) {
      const int64_t nk = std::min(kTile, T - j0), nkp = RoundUp16(nk);
      for (int64_t i0 = j0; i0 < T; i0 += kTile) {
        const int64_t nq = std::min(kTile, T - i0), off = i0 - j0;
        // P = exp(scale * Q K^T - lse), recomputed;  dP = dO V^T
        Gemm(nq, nkp, HS, {Q + i0 * HS, HS, 1}, KT + j0 * HS, kTile, P, kTile, scale, false,
             Causal::kColsToDiag, off);
        Gemm(nq, nkp, HS, {dO + i0 * HS, HS, 1}, VT + j0 * HS, kTile, dP, kTile, 1.0f, false,
             Causal::kColsToDiag, off);
        for (int64_t r = 0; r < nq; ++r) {
          float* p = P + r * kTile;
          const float lr = L[i0 + r];
          const int64_t nvalid = std::min(nk, r + off + 1);
          RowExp(p, nkp, nvalid, lr);
        }
        // dV += P^T dO
        Gemm(nk, HS, nq, {P, 1, kTile}, dO + i0 * HS, HS, dV + j0 * HS, HS, 1.0f, true,
             Causal::kInnerFromDiag, off);
        // dS = P * (dP - D), in place of P (masked entries stay 0)
        for (int64_t r = 0; r < nq; ++r) {
          SoftmaxGradRow(P + r * kTile, dP + r * kTile, D[i0 + r], std::min(nk, r + off + 1));
        }
        // dQ += scale * dS K;  dK += scale * dS^T Q
        Gemm(nq, HS, nk, {P, kTile, 1}, K + j0 * HS, HS, dQ + i0 * HS, HS, scale, true,
             Causal::kInnerToDiag, off);
        Gemm(nk, HS, nq, {P, 1, kTile}, Q + i0 * HS, HS, dK + j0 * HS, HS, scale, true,
             Causal::kInnerFromDiag, off);
      }
    }
    float* dbase = dqkv + b * T * C3 + h * HS;
    Scatter(dbase, C3, dQ, T, HS);
    Scatter(dbase + C, C3, dK, T, HS);
    Scatter(dbase + 2 * C, C3, dV, T, HS);
  }
}

// ---------------------------------------------------------------------------
// By positions: one block of context parallelism's ring.
// ---------------------------------------------------------------------------

// The flash loops above, with three differences: queries and keys come from
// two tensors (Tq rows of q_qkv, Tk rows of kv_qkv); the mask is
// k_pos[j] <= q_pos[i] instead of j <= i, applied per block as the tiles'
// position ranges call for (TileMask); and the results combine with what
// the outputs hold (the forward's merge, the backward's +=).
using PartDims = AttentionPartDims;

// The smallest and largest position of a tile.
struct PosRange {
  int32_t lo, hi;
};
// The position ranges of the kTile-row tiles of pos[0..n).
std::vector<PosRange> TileRanges(const int32_t* pos, int64_t n) {
  std::vector<PosRange> r;
  for (int64_t t0 = 0; t0 < n; t0 += kTile) {
    const auto [lo, hi] = std::minmax_element(pos + t0, pos + std::min(n, t0 + kTile));
    r.push_back({*lo, *hi});
  }
  return r;
}

// What the mask does to a block of a query tile and a key tile. In a ring
// step most blocks are kNone or kSkip: a rank's early chunk against another
// rank's late chunk, say, is entirely masked.
enum class TileMask {
  kSkip,  // no query of the tile may see any key of the tile: no work at all
  kNone,  // every query may see every key
  kSome,  // masked pair by pair
};
TileMask Classify(PosRange q, PosRange k) {
  if (k.lo > q.hi) return TileMask::kSkip;
  if (k.hi <= q.lo) return TileMask::kNone;
  return TileMask::kSome;
}

// s[r * kTile + k] = value for the pairs (query r < nq, key k < nk) of a
// block whose key is later than the query (k_pos[k] > q_pos[r]).
void MaskBlock(float* s, int64_t nq, int64_t nk, const int32_t* q_pos, const int32_t* k_pos,
               float value) {
  for (int64_t r = 0; r < nq; ++r) {
    for (int64_t k = 0; k < nk; ++k) {
      if (k_pos[k] > q_pos[r]) s[r * kTile + k] = value;
    }
  }
}

// Stores one query row of a block's result, o / l and lse2 = m + log(l) (0
// and -inf for a row that saw no allowed key: l == 0), into out_row and
// *lse_at. With merge they hold an earlier partial result (out1, lse1) and
// receive the log-sum-exp merge of both (backend.h); a row with no allowed
// key in this block leaves them untouched, and one with lse1 = -inf takes
// this block's result as it is.
void StoreRow(float* out_row, float* lse_at, const float* o, float m, float l, int64_t HS,
              bool merge) {
  const float lse2 = l > 0.0f ? m + std::log(l) : kNegInf;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // o is 0 where l is
  if (merge && lse2 == kNegInf) return;
  const float lse1 = merge ? *lse_at : kNegInf;
  if (lse1 == kNegInf) {
    for (int64_t c = 0; c < HS; ++c) out_row[c] = o[c] * inv;
    *lse_at = lse2;
    return;
  }
  // logaddexp: the larger term is exp(0) = 1, the smaller one <= 1
  const float lse = std::max(lse1, lse2) + std::log1p(std::exp(-std::fabs(lse1 - lse2)));
  const float w1 = std::exp(lse1 - lse), w2 = std::exp(lse2 - lse);
  for (int64_t c = 0; c < HS; ++c) out_row[c] = out_row[c] * w1 + (o[c] * inv) * w2;
  *lse_at = lse;
}

// dst[t * ld + c] += src[t * HS + c]: Scatter that accumulates.
void ScatterAdd(float* dst, int64_t ld, const float* src, int64_t T, int64_t HS) {
  for (int64_t t = 0; t < T; ++t) {
    if (t + kAhead < T) cpu::PrefetchRowForWrite(dst + (t + kAhead) * ld, HS);
    float* d = dst + t * ld;
    const float* s = src + t * HS;
#pragma omp simd
    for (int64_t c = 0; c < HS; ++c) d[c] += s[c];
  }
}

void PartForward(float* out, float* lse, const float* q_qkv, const float* kv_qkv,
                 const int32_t* q_pos, const int32_t* k_pos, const PartDims& d, bool merge) {
  const int64_t Tq = d.Tq, Tk = d.Tk, C = d.C, HS = d.HS, C3 = 3 * C, BH = d.B * d.NH;
  const int64_t Tkp = (Tk + kTile - 1) / kTile * kTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const std::vector<PosRange> q_tiles = TileRanges(q_pos, Tq), k_tiles = TileRanges(k_pos, Tk);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const float* q_base = q_qkv + b * Tq * C3 + h * HS;
    const float* k_base = kv_qkv + b * Tk * C3 + C + h * HS;  // k of token 0; v at +C
    float* Q =
        cpu::ScratchFloats((Tq + Tk) * HS + HS * Tkp + kTile * HS + kTile * kTile + 2 * kTile);
    float* V = Q + Tq * HS;        // [Tk, HS]
    float* KT = V + Tk * HS;       // K transposed, by tiles (TransposeTiles)
    float* O = KT + HS * Tkp;      // output accumulator of one query tile, [kTile, HS]
    float* S = O + kTile * HS;     // one score block, then P in place
    float* m = S + kTile * kTile;  // running row max
    float* l = m + kTile;          // running sum of exp(S - m)
    Gather(Q, q_base, C3, Tq, HS);
    Gather(V, k_base + C, C3, Tk, HS);
    TransposeTiles(KT, k_base, C3, Tk, HS);

    for (int64_t i0 = 0; i0 < Tq; i0 += kTile) {
      const int64_t nq = std::min(kTile, Tq - i0);
      std::fill(m, m + nq, kNegInf);
      std::fill(l, l + nq, 0.0f);
      std::fill(O, O + nq * HS, 0.0f);  // skipped tiles leave it: no first P V to overwrite it
      for (int64_t j0 = 0; j0 < Tk; j0 += kTile) {
        const TileMask mask = Classify(q_tiles[i0 / kTile], k_tiles[j0 / kTile]);
        if (mask == TileMask::kSkip) continue;
        const int64_t nk = std::min(kTile, Tk - j0), nkp = RoundUp16(nk);
        Gemm(nq, nkp, HS, {Q + i0 * HS, HS, 1}, KT + j0 * HS, kTile, S, kTile, scale, false);
        if (mask == TileMask::kSome) MaskBlock(S, nq, nk, q_pos + i0, k_pos + j0, kNegInf);
        for (int64_t r = 0; r < nq; ++r) {
          OnlineSoftmaxRow(S + r * kTile, nkp, nk, &m[r], &l[r], O + r * HS, HS);
        }
        Gemm(nq, HS, nk, {S, kTile, 1}, V + j0 * HS, HS, O, HS, 1.0f, true);  // O += P V
      }
      for (int64_t r = 0; r < nq; ++r) {
        StoreRow(out + (b * Tq + i0 + r) * C + h * HS, lse + bh * Tq + i0 + r, O + r * HS, m[r],
                 l[r], HS, merge);
      }
    }
  }
}

void PartBackward(float* dq_qkv, float* dkv_qkv, const float* dout, const float* q_qkv,
                  const float* kv_qkv, const float* out, const float* lse, const int32_t* q_pos,
                  const int32_t* k_pos, const PartDims& d) {
  const int64_t Tq = d.Tq, Tk = d.Tk, C = d.C, HS = d.HS, C3 = 3 * C, BH = d.B * d.NH;
  const int64_t Tkp = (Tk + kTile - 1) / kTile * kTile;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const std::vector<PosRange> q_tiles = TileRanges(q_pos, Tq), k_tiles = TileRanges(k_pos, Tk);
  bool any = false;  // a block with an allowed pair: else nothing to add
  for (PosRange q : q_tiles) {
    for (PosRange k : k_tiles) any = any || Classify(q, k) != TileMask::kSkip;
  }
  if (!any) return;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / d.NH, h = bh % d.NH;
    const float* q_base = q_qkv + b * Tq * C3 + h * HS;
    const float* k_base = kv_qkv + b * Tk * C3 + C + h * HS;  // k of token 0; v at +C
    const float* L = lse + bh * Tq;
    // Contiguous copies of Q, dO [Tq, HS] and K [Tk, HS], the dQ, dK, dV
    // accumulators; K and V transposed by tiles; two score blocks; D.
    float* Q = cpu::ScratchFloats(3 * (Tq + Tk) * HS + 2 * HS * Tkp + 2 * kTile * kTile + Tq);
    float* dO = Q + Tq * HS;
    float* dQ = dO + Tq * HS;
    float* K = dQ + Tq * HS;
    float* dK = K + Tk * HS;
    float* dV = dK + Tk * HS;
    float* KT = dV + Tk * HS;
    float* VT = KT + HS * Tkp;
    float* P = VT + HS * Tkp;  // P, then dS in place
    float* dP = P + kTile * kTile;
    float* D = dP + kTile * kTile;
    Gather(Q, q_base, C3, Tq, HS);
    Gather(K, k_base, C3, Tk, HS);
    Gather(dO, dout + b * Tq * C + h * HS, C, Tq, HS);
    TransposeTiles(KT, K, HS, Tk, HS);
    TransposeTiles(VT, k_base + C, C3, Tk, HS);
    std::fill(dQ, dQ + Tq * HS, 0.0f);
    std::fill(dK, dK + 2 * Tk * HS, 0.0f);  // dK and dV
    RowDots(D, dO, out + b * Tq * C + h * HS, C, Tq, HS);

    // As FlashBackward: key tiles outside, each block's products added in
    // increasing tile order.
    for (int64_t j0 = 0; j0 < Tk; j0 += kTile) {
      const int64_t nk = std::min(kTile, Tk - j0), nkp = RoundUp16(nk);
      for (int64_t i0 = 0; i0 < Tq; i0 += kTile) {
        const TileMask mask = Classify(q_tiles[i0 / kTile], k_tiles[j0 / kTile]);
        if (mask == TileMask::kSkip) continue;
        const int64_t nq = std::min(kTile, Tq - i0);
        // P = exp(scale * Q K^T - lse), recomputed, then masked;  dP = dO V^T
        Gemm(nq, nkp, HS, {Q + i0 * HS, HS, 1}, KT + j0 * HS, kTile, P, kTile, scale, false);
        Gemm(nq, nkp, HS, {dO + i0 * HS, HS, 1}, VT + j0 * HS, kTile, dP, kTile, 1.0f, false);
        for (int64_t r = 0; r < nq; ++r) RowExp(P + r * kTile, nkp, nk, L[i0 + r]);
        // After the exp, so that a masked score above the lse cannot meet an
        // lse of -inf (a query with no allowed key anywhere) in it.
        if (mask == TileMask::kSome) MaskBlock(P, nq, nk, q_pos + i0, k_pos + j0, 0.0f);
        // dV += P^T dO;  dS = P * (dP - D);  dQ += scale * dS K;  dK += scale * dS^T Q
        Gemm(nk, HS, nq, {P, 1, kTile}, dO + i0 * HS, HS, dV + j0 * HS, HS, 1.0f, true);
        for (int64_t r = 0; r < nq; ++r) {
          SoftmaxGradRow(P + r * kTile, dP + r * kTile, D[i0 + r], nk);
        }
        Gemm(nq, HS, nk, {P, kTile, 1}, K + j0 * HS, HS, dQ + i0 * HS, HS, scale, true);
        Gemm(nk, HS, nq, {P, 1, kTile}, Q + i0 * HS, HS, dK + j0 * HS, HS, scale, true);
      }
    }
    // The q part of dq_qkv, the k and v parts of dkv_qkv: channels of head h
    // that no other thread touches, even when the two are one tensor.
    ScatterAdd(dq_qkv + b * Tq * C3 + h * HS, C3, dQ, Tq, HS);
    float* dkv_base = dkv_qkv + b * Tk * C3 + h * HS;
    ScatterAdd(dkv_base + C, C3, dK, Tk, HS);
    ScatterAdd(dkv_base + 2 * C, C3, dV, Tk, HS);
  }
}

}  // namespace

absl::Status CpuBackend::AttentionForward(Tensor out, Tensor lse, Tensor qkv, int num_heads,
                                          AttentionKind kind, Tensor scratch) {
  constexpr absl::string_view kOp = "AttentionForward";
  Dims d;
  RETURN_IF_ERROR(CheckQkv(kOp, qkv, num_heads, &d));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "out", out, DType::kF32, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "lse", lse, DType::kF32, {d.B, d.NH, d.T}));
  RETURN_IF_ERROR(CheckScratch(kOp, kind, scratch, d));
  if (kind == AttentionKind::kNaive) {
    NaiveForward(out.f32(), lse.f32(), qkv.f32(), scratch.f32(), d);
  } else {
    FlashForward(out.f32(), lse.f32(), qkv.f32(), d);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AttentionBackward(Tensor dqkv, Tensor dout, Tensor qkv, Tensor out,
                                           Tensor lse, int num_heads, AttentionKind kind,
                                           Tensor scratch) {
  constexpr absl::string_view kOp = "AttentionBackward";
  Dims d;
  RETURN_IF_ERROR(CheckQkv(kOp, qkv, num_heads, &d));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "dqkv", dqkv, DType::kF32, {d.B, d.T, 3 * d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "dout", dout, DType::kF32, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "out", out, DType::kF32, {d.B, d.T, d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "lse", lse, DType::kF32, {d.B, d.NH, d.T}));
  RETURN_IF_ERROR(CheckScratch(kOp, kind, scratch, d));
  if (kind == AttentionKind::kNaive) {
    NaiveBackward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), scratch.f32(), d);
  } else {
    FlashBackward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), d);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AttentionPartForward(Tensor out, Tensor lse, Tensor q_qkv, Tensor kv_qkv,
                                              Tensor q_pos, Tensor k_pos, int num_heads,
                                              bool merge) {
  constexpr absl::string_view kOp = "AttentionPartForward";
  PartDims d;
  RETURN_IF_ERROR(CheckAttentionPart(Device::kCpu, kOp, q_qkv, kv_qkv, q_pos, k_pos, DType::kF32,
                                     num_heads, &d));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "out", out, DType::kF32, {d.B, d.Tq, d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "lse", lse, DType::kF32, {d.B, d.NH, d.Tq}));
  RETURN_IF_ERROR(CheckAttentionPartAliasing(kOp, out, q_qkv, kv_qkv, Tensor(), Tensor()));
  PartForward(out.f32(), lse.f32(), q_qkv.f32(), kv_qkv.f32(), q_pos.i32(), k_pos.i32(), d, merge);
  return absl::OkStatus();
}

absl::Status CpuBackend::AttentionPartBackward(Tensor dq_qkv, Tensor dkv_qkv, Tensor dout,
                                               Tensor q_qkv, Tensor kv_qkv, Tensor out, Tensor lse,
                                               Tensor q_pos, Tensor k_pos, int num_heads) {
  constexpr absl::string_view kOp = "AttentionPartBackward";
  PartDims d;
  RETURN_IF_ERROR(CheckAttentionPart(Device::kCpu, kOp, q_qkv, kv_qkv, q_pos, k_pos, DType::kF32,
                                     num_heads, &d));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "dq_qkv", dq_qkv, DType::kF32, {d.B, d.Tq, 3 * d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "dkv_qkv", dkv_qkv, DType::kF32, {d.B, d.Tk, 3 * d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "dout", dout, DType::kF32, {d.B, d.Tq, d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "out", out, DType::kF32, {d.B, d.Tq, d.C}));
  RETURN_IF_ERROR(cpu::CheckExact(kOp, "lse", lse, DType::kF32, {d.B, d.NH, d.Tq}));
  RETURN_IF_ERROR(CheckAttentionPartAliasing(kOp, Tensor(), q_qkv, kv_qkv, dq_qkv, dkv_qkv));
  PartBackward(dq_qkv.f32(), dkv_qkv.f32(), dout.f32(), q_qkv.f32(), kv_qkv.f32(), out.f32(),
               lse.f32(), q_pos.i32(), k_pos.i32(), d);
  return absl::OkStatus();
}

}  // namespace ladder
