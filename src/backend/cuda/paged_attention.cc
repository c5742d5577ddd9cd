// Validates shapes, dtypes and devices, then calls the kernel launchers.
#include "src/backend/cuda/paged_attention.h"

#include "kernels/paged_attention.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kWrite[] = "KvCacheWrite";
constexpr char kAttn[] = "PagedAttentionForward";

// The cache's format and shape: S rows of C channels, k and v alike, and for
// int8 the [S, NH] scales (as the CPU backend's CheckCache).
absl::Status CheckCache(absl::string_view op, const PagedKv& c, int num_heads, int64_t* S,
                        int64_t* C) {
  const DType dt = c.int8() ? DType::kI8 : DType::kF32;
  RETURN_IF_ERROR(RowView(op, "k cache", c.k, dt, S, C));
  RETURN_IF_ERROR(CheckRows(op, "v cache", c.v, dt, *S, *C));
  if (num_heads <= 0 || *C % num_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", num_heads, " heads do not divide the cache width ", *C));
  }
  if (c.int8()) {
    RETURN_IF_ERROR(CheckRows(op, "k scales", c.k_scale, DType::kF32, *S, num_heads));
    RETURN_IF_ERROR(CheckRows(op, "v scales", c.v_scale, DType::kF32, *S, num_heads));
  } else if (!c.v_scale.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": v scales given for an fp32 cache"));
  }
  if (3 * *C > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": cache width ", *C, " is too large"));
  }
  return absl::OkStatus();
}

// qkv [N, 3C], f32 or bf16 (the call's activation dtype).
absl::Status CheckQkv(absl::string_view op, const Tensor& qkv, int64_t C, int64_t* N) {
  int64_t C3 = 0;
  RETURN_IF_ERROR(RowView(op, "qkv", qkv, qkv.dtype, N, &C3));
  if (C3 != 3 * C) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": qkv has ", C3, " columns, expected 3 x ", C));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status KvCacheWrite(const PagedKv& cache, Tensor qkv, Tensor slots, int num_heads,
                          cudaStream_t stream) {
  int64_t S = 0, C = 0, N = 0;
  RETURN_IF_ERROR(CheckCache(kWrite, cache, num_heads, &S, &C));
  RETURN_IF_ERROR(CheckQkv(kWrite, qkv, C, &N));
  RETURN_IF_ERROR(CheckNumel(kWrite, "slots", slots, DType::kI32, N));
  if (N * num_heads > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(kWrite, ": too many tokens x heads"));
  }
  const int n = static_cast<int>(N), s = static_cast<int>(S), hs = static_cast<int>(C / num_heads);
  return WithStorage(kWrite, "qkv", qkv.dtype, [&](auto tag) {
    using A = typename decltype(tag)::type;
    if (cache.int8()) {
      return CudaStatus(kernels::LaunchKvCacheWriteI8<A>(
                            cache.k.i8(), cache.v.i8(), cache.k_scale.f32(), cache.v_scale.f32(),
                            Data<A>(qkv), slots.i32(), n, s, num_heads, hs, stream),
                        kWrite);
    }
    return CudaStatus(kernels::LaunchKvCacheWriteF32<A>(cache.k.f32(), cache.v.f32(), Data<A>(qkv),
                                                        slots.i32(), n, s, num_heads, hs, stream),
                      kWrite);
  });
}

int64_t PagedAttentionScratchFloats(const Tensor& qkv, const Tensor& block_tables, int num_heads) {
  if (qkv.rank != 2 || block_tables.rank != 2 || num_heads <= 0) return 0;
  const int64_t N = qkv.dim(0), C = qkv.dim(1) / 3, max_blocks = block_tables.dim(1);
  if (N <= 0 || C <= 0 || C % num_heads != 0 || max_blocks <= 0 || max_blocks > INT_MAX) return 0;
  return kernels::PagedAttentionScratchFloats(N, num_heads, C / num_heads,
                                              static_cast<int>(max_blocks));
}

absl::Status PagedAttentionForward(Tensor out, Tensor qkv, const PagedKv& cache,
                                   Tensor block_tables, Tensor seq, Tensor pos, int num_heads,
                                   Tensor scratch, cudaStream_t stream) {
  int64_t S = 0, C = 0, N = 0, num_seqs = 0, max_blocks = 0;
  RETURN_IF_ERROR(CheckCache(kAttn, cache, num_heads, &S, &C));
  RETURN_IF_ERROR(CheckQkv(kAttn, qkv, C, &N));
  RETURN_IF_ERROR(CheckRows(kAttn, "out", out, qkv.dtype, N, C));
  RETURN_IF_ERROR(
      RowView(kAttn, "block_tables", block_tables, DType::kI32, &num_seqs, &max_blocks));
  RETURN_IF_ERROR(CheckNumel(kAttn, "seq", seq, DType::kI32, N));
  RETURN_IF_ERROR(CheckNumel(kAttn, "pos", pos, DType::kI32, N));
  if (N * num_heads > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(kAttn, ": too many tokens x heads"));
  }
  const int64_t need = PagedAttentionScratchFloats(qkv, block_tables, num_heads);
  if (need > 0) RETURN_IF_ERROR(CheckNumel(kAttn, "scratch", scratch, DType::kF32, need, true));
  const int n = static_cast<int>(N), s = static_cast<int>(S), hs = static_cast<int>(C / num_heads);
  const int seqs = static_cast<int>(num_seqs), blocks = static_cast<int>(max_blocks);
  return WithStorage(kAttn, "qkv", qkv.dtype, [&](auto tag) {
    using A = typename decltype(tag)::type;
    if (cache.int8()) {
      return CudaStatus(kernels::LaunchPagedAttentionI8<A>(
                            Data<A>(out), scratch.f32(), Data<A>(qkv), cache.k.i8(), cache.v.i8(),
                            cache.k_scale.f32(), cache.v_scale.f32(), block_tables.i32(), seq.i32(),
                            pos.i32(), n, s, num_heads, hs, seqs, blocks, stream),
                        kAttn);
    }
    return CudaStatus(
        kernels::LaunchPagedAttentionF32<A>(
            Data<A>(out), scratch.f32(), Data<A>(qkv), cache.k.f32(), cache.v.f32(),
            block_tables.i32(), seq.i32(), pos.i32(), n, s, num_heads, hs, seqs, blocks, stream),
        kAttn);
  });
}

LADDER_CUDA_END
