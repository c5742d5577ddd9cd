// Token + position embedding, forward and a deterministic backward.
//
// Storage: the forward's out, wte and wpe are T, float or __nv_bfloat16 (the
// activations and the forward's weights share one storage dtype, backend.h
// "Precision"); the backward reads dout as T and accumulates dwte and dwpe
// in fp32 whatever T is (parameter gradients). Arithmetic is fp32: bf16
// elements are widened exactly on load, and out is rounded once on store.
// s = sizeof(T) below: 4 or 2 bytes per element.
//
// Forward: out[n,:] = wte[tokens[n] - vocab_start,:] + wpe[positions[n],:],
// each term present only when its id is in range (a vocabulary shard under
// tensor parallelism holds some of the token rows; the other ranks supply the
// rest and an all-reduce sums them). It is a gather: per row it reads two rows
// of C elements and writes one, 3sC bytes (plus 8 bytes of ids) and C FLOPs,
// so it is bound by memory bandwidth; the kernel only has to read rows with
// wide, coalesced accesses. Launch: one block per row (grid.y splits rows
// wider than 256 threads x kVec elements), a thread per 16-byte vector of the
// row (kVec = kVec16<T>: 4 floats or 8 bf16, when C % kVec == 0 and every
// pointer is aligned; 1 otherwise), the block sized to the row (C/kVec
// threads rounded up to a warp, at most 256) so that a GPT-2 row of 768
// channels is one block of 192 (f32) or 96 (bf16) threads with nothing idle.
//
// Backward: dwte[token,:] += dout[n,:] and dwpe[position,:] += dout[n,:]. A
// scatter-add: many rows hit the same token (and every batch row hits the
// same positions), so the obvious kernel (llm.c's first version) is atomicAdd
// per float, whose order and therefore whose rounding changes from run to run.
// Here the rows are first sorted by id, then each distinct id's block sums its
// rows in row order:
//   1. keys: the id's row in the table (token - vocab_start, or the position),
//      or `range` (one past the table) for an id that contributes nothing.
//   2. a stable LSD radix sort of (key, row) pairs, 8 bits per pass
//      (ceil(bits(range) / 8) passes: 2 for a 50304-token vocabulary or 1024
//      positions). Each pass is three small kernels on integers only:
//        - per tile of 256 rows, a histogram of the digit (thread d counts
//          digit d in the tile, from shared memory): hist[digit][tile];
//        - an exclusive scan of hist in digit-major order (one block), which
//          gives each (digit, tile) group its first slot in the output;
//        - per tile, each row goes to its group's first slot plus the number
//          of earlier rows of the tile with the same digit.
//      Every position is computed, not raced for: no atomics, and the sort is
//      stable, so rows with equal keys stay in row order.
//   3. one block per position of the sorted keys; the block that starts a run
//      of equal keys (the others exit at once) loads the table row, adds its
//      rows of dout in sorted order, which is row order, and stores it.
// The result is bitwise the CPU's loop over rows n = 0..N-1 (old value, then
// each row's gradient in order; with bf16 dout, of its widened values), on
// any GPU and any run. Cost: the sort moves a few tens of bytes per row per
// pass (small next to the sC bytes of each dout row); the sum reads each dout
// row once (16-byte vectors of kVec16<T> elements when C and the alignment
// allow) and each touched fp32 table row once. The price of summing in row order is that a token
// found in many rows is summed by one block: a frequent token (a few percent of a batch of tens of
// thousands of rows) makes that block the long pole. Its rows are loaded kRowsInFlight at a time so
// their latencies overlap; splitting a long run across blocks would be faster still but would add a
// second level of partial sums, giving up the bitwise equality with the CPU's sequential sum.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/embedding.h"
#include "kernels/launch.cuh"

LADDER_KERNELS_BEGIN
namespace {

constexpr int kMaxRowThreads = 256;
// Radix sort: 8-bit digits, tiles of 256 rows (one thread per row and, in the
// histogram, one thread per digit value).
constexpr int kRadixBits = 8;
constexpr int kRadix = 1 << kRadixBits;
constexpr int kTile = kRadix;
constexpr int kScanThreads = 1024;
// Rows of one run whose loads the segment sum issues together.
constexpr int kRowsInFlight = 4;

int Tiles(int N) { return (N + kTile - 1) / kTile; }

// Threads for one row of C floats read kVec at a time: a whole number of
// warps, at most kMaxRowThreads; grid.y covers the rest of a wide row.
int RowThreads(int C, int vec) {
  const int vectors = (C + vec - 1) / vec;
  const int warps = std::min((vectors + kWarpSize - 1) / kWarpSize, kMaxRowThreads / kWarpSize);
  return std::max(warps, 1) * kWarpSize;
}

// ---- forward ------------------------------------------------------------------

// Block (RowThreads): row blockIdx.x, vectors blockIdx.y * blockDim.x + threadIdx.x.
template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxRowThreads)
    EmbeddingForwardKernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                           const int32_t* __restrict__ positions, const T* __restrict__ wte,
                           const T* __restrict__ wpe, int C, int64_t vocab_start, int vshard,
                           int max_t) {
  const int n = blockIdx.x;
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
  if (c >= C) return;
  const int64_t r = int64_t{tokens[n]} - vocab_start;
  const T* e = r >= 0 && r < vshard ? wte + r * C + c : nullptr;
  const T* p = nullptr;
  if (wpe != nullptr) {
    const int t = positions[n];
    if (t >= 0 && t < max_t) p = wpe + static_cast<int64_t>(t) * C + c;
  }
  // The CPU's four cases, so that a lone term is copied (exactly, in either
  // storage), not added to 0.
  Vec<T, kVec> o;
  if (e != nullptr) {
    o = LoadVec<kVec>(e);
    if (p != nullptr) {
      const Vec<T, kVec> q = LoadVec<kVec>(p);
#pragma unroll
      for (int k = 0; k < kVec; ++k) o.v[k] = FromFloat<T>(ToFloat(o.v[k]) + ToFloat(q.v[k]));
    }
  } else if (p != nullptr) {
    o = LoadVec<kVec>(p);
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) o.v[k] = FromFloat<T>(0.0f);
  }
  StoreVec<kVec>(out + static_cast<int64_t>(n) * C + c, o);
}

// ---- backward: sort rows by key -------------------------------------------------

// keys[n] = ids[n] - base if that is in [0, range), else range; rows[n] = n.
__global__ void __launch_bounds__(kTile)
    MakeKeysKernel(int32_t* __restrict__ keys, int32_t* __restrict__ rows,
                   const int32_t* __restrict__ ids, int N, int64_t base, int range) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t k = int64_t{ids[n]} - base;
  keys[n] = k >= 0 && k < range ? static_cast<int32_t>(k) : range;
  rows[n] = n;
}

// Loads this tile's digits into shared memory (-1 past the last row) and
// returns this thread's row.
__device__ __forceinline__ int LoadTileDigits(int* digits, const int32_t* keys, int N, int shift) {
  const int row = blockIdx.x * kTile + threadIdx.x;
  digits[threadIdx.x] = row < N ? (keys[row] >> shift) & (kRadix - 1) : -1;
  __syncthreads();
  return row;
}

// hist[d * tiles + tile] = number of rows of the tile whose digit is d.
// Block: kTile threads; thread d counts digit d. Shared: kTile ints.
__global__ void __launch_bounds__(kTile)
    TileHistogramKernel(int32_t* __restrict__ hist, const int32_t* __restrict__ keys, int N,
                        int shift) {
  int* digits = DynamicShared<int>();
  LoadTileDigits(digits, keys, N, shift);
  const int d = threadIdx.x;
  int count = 0;
  for (int j = 0; j < kTile; ++j) count += digits[j] == d ? 1 : 0;
  hist[static_cast<int64_t>(d) * gridDim.x + blockIdx.x] = count;
}

// Exclusive prefix sum of data[0, total) in place, one block of kScanThreads:
// each thread sums a contiguous segment, thread 0 scans the segment sums, each
// thread then writes its segment's prefixes. Integers: the order is free, this
// one is just simple. Shared: kScanThreads ints.
__global__ void __launch_bounds__(kScanThreads) ExclusiveScanKernel(int32_t* data, int total) {
  int* sums = DynamicShared<int>();
  const int t = threadIdx.x;
  const int per = (total + kScanThreads - 1) / kScanThreads;
  const int begin = t * per < total ? t * per : total;
  const int end = begin + per < total ? begin + per : total;
  int s = 0;
  for (int i = begin; i < end; ++i) s += data[i];
  sums[t] = s;
  __syncthreads();
  if (t == 0) {
    int run = 0;
    for (int k = 0; k < kScanThreads; ++k) {
      const int v = sums[k];
      sums[k] = run;
      run += v;
    }
  }
  __syncthreads();
  int run = sums[t];
  for (int i = begin; i < end; ++i) {
    const int v = data[i];
    data[i] = run;
    run += v;
  }
}

// One stable pass: row i of tile b with digit d goes to slot
// offsets[d * tiles + b] + (rows of tile b before i with digit d).
// Block: kTile threads, one per row. Shared: kTile ints.
__global__ void __launch_bounds__(kTile)
    RadixScatterKernel(int32_t* __restrict__ keys_out, int32_t* __restrict__ rows_out,
                       const int32_t* __restrict__ keys_in, const int32_t* __restrict__ rows_in,
                       const int32_t* __restrict__ offsets, int N, int shift) {
  int* digits = DynamicShared<int>();
  const int row = LoadTileDigits(digits, keys_in, N, shift);
  if (row >= N) return;
  const int d = digits[threadIdx.x];
  int rank = 0;
  for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) rank += digits[j] == d ? 1 : 0;
  const int slot = offsets[static_cast<int64_t>(d) * gridDim.x + blockIdx.x] + rank;
  keys_out[slot] = keys_in[row];
  rows_out[slot] = rows_in[row];
}

// ---- backward: per-key sums in row order ------------------------------------------

// Gradient rows' fp32 accumulators move through LoadFloats/StoreFloats
// (common.cuh): with bf16 dout kVec is 8, more than one 16-byte access.

// Block (RowThreads): sorted position blockIdx.x, vectors blockIdx.y * blockDim.x
// + threadIdx.x of the row. Only the block at the start of a run of equal keys
// works: grad[key,:] += its rows of dout, in sorted (= row) order, in fp32.
template <typename T, int kVec>
__global__ void __launch_bounds__(kMaxRowThreads)
    SegmentSumKernel(float* __restrict__ grad, const int32_t* __restrict__ keys,
                     const int32_t* __restrict__ rows, const T* __restrict__ dout, int N, int C,
                     int range) {
  const int p = blockIdx.x;
  const int key = keys[p];
  if (key == range || (p > 0 && keys[p - 1] == key)) return;
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * kVec;
  if (c >= C) return;
  float* g = grad + static_cast<int64_t>(key) * C + c;
  Vec<float, kVec> acc = LoadFloats<kVec>(g);
  int q = p;
  // Keys are sorted, so keys[q + kRowsInFlight - 1] == key means the whole
  // group belongs to the run: its loads are independent and go out together;
  // the adds still happen one row at a time, in order.
  for (; q + kRowsInFlight <= N && keys[q + kRowsInFlight - 1] == key; q += kRowsInFlight) {
    Vec<T, kVec> d[kRowsInFlight];
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
      d[r] = LoadVec<kVec>(dout + static_cast<int64_t>(rows[q + r]) * C + c);
    }
#pragma unroll
    for (int r = 0; r < kRowsInFlight; ++r) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc.v[k] += ToFloat(d[r].v[k]);
    }
  }
  for (; q < N && keys[q] == key; ++q) {
    const Vec<T, kVec> d = LoadVec<kVec>(dout + static_cast<int64_t>(rows[q]) * C + c);
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc.v[k] += ToFloat(d.v[k]);
  }
  StoreFloats<kVec>(g, acc);
}

// grad[ids[n] - base,:] += dout[n,:] for ids in range, deterministically.
template <typename T>
cudaError_t ScatterAddRows(float* grad, const T* dout, const int32_t* ids, int N, int C,
                           int64_t base, int range, int32_t* scratch, cudaStream_t stream) {
  const int tiles = Tiles(N);
  int32_t* keys = scratch;
  int32_t* rows = keys + N;
  int32_t* keys_tmp = rows + N;
  int32_t* rows_tmp = keys_tmp + N;
  int32_t* hist = rows_tmp + N;
  cudaError_t err =
      Launch<MakeKeysKernel>(tiles, kTile, 0, stream, keys, rows, ids, N, base, range);
  if (err != cudaSuccess) return err;
  // Keys are in [0, range]: std::bit_width(range) bits, kRadixBits per pass.
  const int bits = std::bit_width(static_cast<unsigned>(range));
  const int hist_len = kRadix * tiles;
  for (int shift = 0; shift < bits; shift += kRadixBits) {
    err = Launch<TileHistogramKernel>(tiles, kTile, sizeof(int) * kTile, stream, hist, keys, N,
                                      shift);
    if (err != cudaSuccess) return err;
    err = Launch<ExclusiveScanKernel>(1, kScanThreads, sizeof(int) * kScanThreads, stream, hist,
                                      hist_len);
    if (err != cudaSuccess) return err;
    err = Launch<RadixScatterKernel>(tiles, kTile, sizeof(int) * kTile, stream, keys_tmp, rows_tmp,
                                     keys, rows, hist, N, shift);
    if (err != cudaSuccess) return err;
    std::swap(keys, keys_tmp);
    std::swap(rows, rows_tmp);
  }
  constexpr int kWide = kVec16<T>;
  const bool vec = C % kWide == 0 && Aligned16(grad) && Aligned16(dout);
  const int kVec = vec ? kWide : 1;
  const int threads = RowThreads(C, kVec);
  const dim3 grid(N, (C + threads * kVec - 1) / (threads * kVec));
  if (vec) {
    return Launch<SegmentSumKernel<T, kWide>>(grid, threads, 0, stream, grad, keys, rows, dout, N,
                                              C, range);
  }
  return Launch<SegmentSumKernel<T, 1>>(grid, threads, 0, stream, grad, keys, rows, dout, N, C,
                                        range);
}

}  // namespace

template <typename T>
cudaError_t LaunchEmbeddingForward(T* out, const int32_t* tokens, const int32_t* positions,
                                   const T* wte, const T* wpe, int N, int C, int64_t vocab_start,
                                   int vshard, int max_t, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  constexpr int kWide = kVec16<T>;
  const bool vec =
      C % kWide == 0 && Aligned16(out) && Aligned16(wte) && (wpe == nullptr || Aligned16(wpe));
  const int kVec = vec ? kWide : 1;
  const int threads = RowThreads(C, kVec);
  const dim3 grid(N, (C + threads * kVec - 1) / (threads * kVec));
  if (vec) {
    return Launch<EmbeddingForwardKernel<T, kWide>>(
        grid, threads, 0, stream, out, tokens, positions, wte, wpe, C, vocab_start, vshard, max_t);
  }
  return Launch<EmbeddingForwardKernel<T, 1>>(grid, threads, 0, stream, out, tokens, positions, wte,
                                              wpe, C, vocab_start, vshard, max_t);
}

size_t EmbeddingBackwardScratchInts(int N) {
  if (N <= 0) return 0;
  return 4 * static_cast<size_t>(N) + static_cast<size_t>(kRadix) * Tiles(N);
}

template <typename T>
cudaError_t LaunchEmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                                    const int32_t* positions, int N, int C, int64_t vocab_start,
                                    int vshard, int max_t, int32_t* scratch, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return cudaSuccess;
  // The sort's histogram (256 ints per tile of 256 rows) is indexed by int.
  if (static_cast<int64_t>(kRadix) * Tiles(N) > INT32_MAX / 2) return cudaErrorInvalidValue;
  // The two scatters share the scratch; the stream orders them.
  if (dwte != nullptr && vshard > 0) {
    const cudaError_t err =
        ScatterAddRows(dwte, dout, tokens, N, C, vocab_start, vshard, scratch, stream);
    if (err != cudaSuccess) return err;
  }
  if (dwpe != nullptr && max_t > 0) {
    return ScatterAddRows(dwpe, dout, positions, N, C, 0, max_t, scratch, stream);
  }
  return cudaSuccess;
}

template cudaError_t LaunchEmbeddingForward<float>(float*, const int32_t*, const int32_t*,
                                                   const float*, const float*, int, int, int64_t,
                                                   int, int, cudaStream_t);
template cudaError_t LaunchEmbeddingForward<__nv_bfloat16>(__nv_bfloat16*, const int32_t*,
                                                           const int32_t*, const __nv_bfloat16*,
                                                           const __nv_bfloat16*, int, int, int64_t,
                                                           int, int, cudaStream_t);
template cudaError_t LaunchEmbeddingBackward<float>(float*, float*, const float*, const int32_t*,
                                                    const int32_t*, int, int, int64_t, int, int,
                                                    int32_t*, cudaStream_t);
template cudaError_t LaunchEmbeddingBackward<__nv_bfloat16>(float*, float*, const __nv_bfloat16*,
                                                            const int32_t*, const int32_t*, int,
                                                            int, int64_t, int, int, int32_t*,
                                                            cudaStream_t);

LADDER_KERNELS_END
