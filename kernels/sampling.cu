// Next-token sampling on the device: Backend::SampleTokens, defined by
// src/backend/token_sampling.h (the CPU backend runs that reference).
//
// Why on the device: a decode step of a small model at batch 1 is tens of
// microseconds of GPU work, while copying a 50k-entry row of logits back and
// sampling it on the host (a double softmax, a partial sort for top-k) costs
// more than the step. Here the logits stay where they are and the step copies
// back one 4-byte id per sequence.
//
// What one block (kThreads = 512 threads) does for one spec, every pass a
// read of the row (V floats, from L2 after the first):
//   1. max key       the argmax; greedy stops here.
//   2. top-k         radix select of the k-th largest key, 8 passes of 8 bits.
//   3. top-p         the kept mass (1 pass), then a radix select weighted by
//                    mass (8 passes): the key where the mass walked from the
//                    top first reaches top_p of it.
//   4. draw          per-thread sums over contiguous chunks, then one thread
//                    walks warps, chunks and elements in id order to where the
//                    running sum passes uniform x total.
// Ranking uses a 64-bit key per element, the logit's bits made monotone in
// the high half and the complemented id in the low half, so keys are unique
// and "larger key" is "larger logit, then lower id": the reference's order,
// and a radix select over keys finds an exact position in it (no ties to
// break afterwards). The weights are the reference's, exp((x - top) / T) in
// double, recomputed where needed rather than stored (a row of doubles is
// 400 KB, far beyond shared memory).
//
// Rounding: the histograms' and chunks' sums are in a different order from
// the reference's single loop, so the draw, or the nucleus' last token, can
// differ from the reference's where the uniform lands within a few ulp of a
// boundary between two tokens; the walk's fallback (the last token with
// weight in the range) keeps every outcome a token the distribution allows.
// Greedy is exact.
#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/sampling.h"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kThreads = 512;  // 1024 would cap a thread at 64 registers: double exp spills
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kBins = 256;  // radix digit of 8 bits
constexpr int kBinsPerLane = kBins / kWarpSize;
static_assert(kWarps <= kWarpSize, "the block reductions reduce one value per warp in one warp");

using Key = unsigned long long;

struct Shared {
  uint32_t count[kBins];       // radix histogram: keys per digit
  double mass[kBins];          // and their weight (top-p)
  double chunk_sum[kThreads];  // the draw: each thread's chunk
  double warp_sum[kWarps];
  Key warp_key[kWarps];
  Key digit;         // the chosen digit, broadcast
  double remaining;  // what is left to find below it (mass select)
  uint32_t rank;     // the same for the count select
  int32_t reached;   // the mass select found its edge
  int32_t token;     // the draw
};

// Unique, monotone: larger logit first, then lower id. -0 ranks as +0 (they
// compare equal, and the reference breaks that tie by id too).
__device__ __forceinline__ Key KeyOf(float x, int i) {
  unsigned b = __float_as_uint(x);
  if (b == 0x80000000u) b = 0;
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<Key>(b) << 32) | (0xffffffffu - static_cast<unsigned>(i));
}

__device__ __forceinline__ int TokenOf(Key key) {
  return static_cast<int>(0xffffffffu - static_cast<unsigned>(key & 0xffffffffu));
}

__device__ __forceinline__ double Weight(float x, double top, double temperature) {
  return exp((static_cast<double>(x) - top) / temperature);
}

// The block's largest key, returned to every thread: a butterfly per warp,
// then every warp reduces the warps' results the same way.
__device__ Key BlockMaxKey(Key v, Shared& sh) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) {
    const Key other = __shfl_xor_sync(kFullMask, v, o);
    v = other > v ? other : v;
  }
  if (threadIdx.x % kWarpSize == 0) sh.warp_key[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  const int lane = threadIdx.x % kWarpSize;
  v = lane < kWarps ? sh.warp_key[lane] : 0;
  for (int o = kWarpSize / 2; o > 0; o /= 2) {
    const Key other = __shfl_xor_sync(kFullMask, v, o);
    v = other > v ? other : v;
  }
  __syncthreads();  // warp_key may be written again
  return v;
}

// The block's sum, the same bits in every thread and on every run.
__device__ double BlockSum(double v, Shared& sh) {
  for (int o = kWarpSize / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  if (threadIdx.x % kWarpSize == 0) sh.warp_sum[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  const int lane = threadIdx.x % kWarpSize;
  v = lane < kWarps ? sh.warp_sum[lane] : 0.0;
  for (int o = kWarpSize / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  __syncthreads();
  return v;
}

// The k-th largest key of the row (1 <= k <= V): most significant digit
// first, a histogram of the next digit over the keys that match the digits
// chosen so far, then one warp finds the bin holding rank k (lane l owns
// bins 255 - 8l .. 248 - 8l, the highest first, and a shuffle scan gives
// each lane the count above its bins).
__device__ Key KthLargestKey(const float* x, int V, uint32_t k, Shared& sh) {
  Key prefix = 0, mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) sh.count[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += kThreads) {
      const Key key = KeyOf(x[i], i);
      if ((key & mask) == prefix) atomicAdd(&sh.count[(key >> shift) & 0xff], 1u);
    }
    __syncthreads();
    if (threadIdx.x < kWarpSize) {
      const int lane = threadIdx.x;
      uint32_t mine = 0;
      for (int j = 0; j < kBinsPerLane; ++j) mine += sh.count[kBins - 1 - lane * kBinsPerLane - j];
      uint32_t incl = mine;
      for (int o = 1; o < kWarpSize; o *= 2) {
        const uint32_t up = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += up;
      }
      const uint32_t above = incl - mine;
      if (above < k && k <= incl) {  // exactly one lane: the counts are exact
        uint32_t acc = above;
        for (int j = 0; j < kBinsPerLane; ++j) {
          const int bin = kBins - 1 - lane * kBinsPerLane - j;
          if (acc + sh.count[bin] >= k) {
            sh.digit = static_cast<Key>(bin);
            sh.rank = k - acc;
            break;
          }
          acc += sh.count[bin];
        }
      }
    }
    __syncthreads();
    k = sh.rank;
    prefix |= sh.digit << shift;
    mask |= Key{0xff} << shift;
    __syncthreads();  // everyone has read digit and rank before the next pass
  }
  return prefix;
}

// The nucleus' edge: the key at which the weight of the keys >= floor,
// walked from the largest down, first reaches `target`; `floor` itself (keep
// them all) should rounding leave the target beyond their total. The same
// radix walk as KthLargestKey with a second histogram of weights.
__device__ Key NucleusKey(const float* x, int V, Key floor, double top, double temperature,
                          double target, Shared& sh) {
  Key prefix = 0, mask = 0;
  double remaining = target;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      sh.count[b] = 0;
      sh.mass[b] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += kThreads) {
      const Key key = KeyOf(x[i], i);
      if (key >= floor && (key & mask) == prefix) {
        const int bin = static_cast<int>((key >> shift) & 0xff);
        atomicAdd(&sh.count[bin], 1u);
        atomicAdd(&sh.mass[bin], Weight(x[i], top, temperature));
      }
    }
    __syncthreads();
    if (threadIdx.x < kWarpSize) {
      const int lane = threadIdx.x;
      double mine = 0;
      uint32_t items = 0;
      for (int j = 0; j < kBinsPerLane; ++j) {
        const int bin = kBins - 1 - lane * kBinsPerLane - j;
        mine += sh.mass[bin];
        items += sh.count[bin];
      }
      double incl = mine;
      for (int o = 1; o < kWarpSize; o *= 2) {
        const double up = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += up;
      }
      double above = __shfl_up_sync(kFullMask, incl, 1);
      if (lane == 0) above = 0;
      const unsigned hits = __ballot_sync(kFullMask, items > 0 && incl >= remaining);
      int first = 0;
      while (first < kWarpSize && ((hits >> first) & 1u) == 0) ++first;
      if (lane == 0) sh.reached = hits != 0;
      if (lane == first) {
        // Walk the lane's bins; rounding may leave the edge past the last
        // one with weight, which then takes it.
        double acc = above, before = above;
        int chosen = -1;
        for (int j = 0; j < kBinsPerLane; ++j) {
          const int bin = kBins - 1 - lane * kBinsPerLane - j;
          if (sh.count[bin] == 0) continue;
          before = acc;
          acc += sh.mass[bin];
          chosen = bin;
          if (acc >= remaining) break;
        }
        sh.digit = static_cast<Key>(chosen);
        sh.remaining = remaining - before;
      }
    }
    __syncthreads();
    if (!sh.reached) return floor;  // the same for every thread
    remaining = sh.remaining;
    prefix |= sh.digit << shift;
    mask |= Key{0xff} << shift;
    __syncthreads();
  }
  return prefix;
}

// The draw over the keys >= floor: the first token, in id order, whose
// running weight passes uniform x total. Thread t sums a contiguous chunk;
// one thread then walks the warps' sums, the chosen warp's 32 chunk sums
// and the chosen chunk's weights, each level starting from the running sum
// the level above reached, and falling back to its last entry with weight.
__device__ int Draw(const float* x, int V, Key floor, double top, double temperature,
                    double uniform, Shared& sh) {
  const int chunk = (V + kThreads - 1) / kThreads;
  const int begin = MinInt(V, static_cast<int>(threadIdx.x) * chunk);
  const int end = MinInt(V, begin + chunk);
  double mine = 0;
  for (int i = begin; i < end; ++i) {
    if (KeyOf(x[i], i) >= floor) mine += Weight(x[i], top, temperature);
  }
  sh.chunk_sum[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x < kWarpSize) {
    if (threadIdx.x < kWarps) {
      double w = 0;
      for (int t = 0; t < kWarpSize; ++t) w += sh.chunk_sum[threadIdx.x * kWarpSize + t];
      sh.warp_sum[threadIdx.x] = w;
    }
    __syncwarp();
    if (threadIdx.x == 0) {
      double total = 0;
      for (int t = 0; t < kWarps; ++t) total += sh.warp_sum[t];
      const double u = uniform * total;
      // One level: the first of n sums whose running total from *start
      // passes u (else the last with weight); *start becomes the total
      // before it.
      auto level = [u](const double* sums, int n, double* start) {
        double cum = *start, before = *start;
        int pick = 0;
        for (int t = 0; t < n; ++t) {
          if (!(sums[t] > 0)) continue;
          const double next = cum + sums[t];
          pick = t;
          before = cum;
          cum = next;
          if (u < cum) break;
        }
        *start = before;
        return pick;
      };
      double start = 0;
      const int warp = level(sh.warp_sum, kWarps, &start);
      const int t = warp * kWarpSize + level(sh.chunk_sum + warp * kWarpSize, kWarpSize, &start);
      const int first = MinInt(V, t * chunk), last = MinInt(V, first + chunk);
      double cum = start;
      int token = first;
      for (int i = first; i < last; ++i) {
        if (KeyOf(x[i], i) < floor) continue;
        const double p = Weight(x[i], top, temperature);
        if (!(p > 0)) continue;
        cum += p;
        token = i;
        if (u < cum) break;
      }
      sh.token = token;
    }
  }
  __syncthreads();
  return sh.token;
}

__global__ void __launch_bounds__(kThreads)
    SampleTokensKernel(int32_t* ids, const float* logits, int64_t ld, int V,
                       const SampleRow* specs) {
  Shared& sh = *DynamicShared<Shared>();
  const SampleRow spec = specs[blockIdx.x];
  const float* x = logits + spec.row * ld;
  Key best = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const Key key = KeyOf(x[i], i);
    best = key > best ? key : best;
  }
  best = BlockMaxKey(best, sh);
  if (!(spec.temperature > 0)) {
    if (threadIdx.x == 0) ids[blockIdx.x] = TokenOf(best);
    return;
  }
  const double top = x[TokenOf(best)];
  Key floor = 0;  // every key
  if (spec.top_k > 0 && spec.top_k < V) {
    floor = KthLargestKey(x, V, static_cast<uint32_t>(spec.top_k), sh);
  }
  if (spec.top_p < 1) {
    double kept = 0;
    for (int i = threadIdx.x; i < V; i += kThreads) {
      if (KeyOf(x[i], i) >= floor) kept += Weight(x[i], top, spec.temperature);
    }
    kept = BlockSum(kept, sh);
    floor = NucleusKey(x, V, floor, top, spec.temperature, spec.top_p * kept, sh);
  }
  const int token = Draw(x, V, floor, top, spec.temperature, spec.uniform, sh);
  if (threadIdx.x == 0) ids[blockIdx.x] = token;
}

}  // namespace

cudaError_t LaunchSampleTokens(int32_t* ids, const float* logits, int64_t ld, int V,
                               const SampleRow* specs, int M, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  return Launch<SampleTokensKernel>(dim3(static_cast<unsigned>(M)), dim3(kThreads), sizeof(Shared),
                                    stream, ids, logits, ld, V, specs);
}

LADDER_KERNELS_END
