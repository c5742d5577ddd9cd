// The CUDA paged KV cache kernels (kernels/paged_attention.cu) against the CPU
// reference (CpuBackend), fp32 and int8 caches: a few sequences of different
// lengths (1, a whole block of 16, lengths that end mid-block) whose blocks
// are scattered over the cache in shuffled order, written with KvCacheWrite,
// then attended by an odd number of query tokens (a prefill chunk of several
// tokens for one sequence, a decode token for the others).
//
// What is compared, and how closely:
//   KvCacheWrite: the whole cache (k, v and, for int8, k_scale, v_scale),
//     bitwise: fp32 is a copy; int8 is QuantizeSymmetric's arithmetic
//     exactly. The caches start from the same non-zero fill on both sides,
//     so a row written that should not be shows up too.
//   PagedAttentionForward: |gpu - ref| <= 2e-5 * (1 + |ref|) per element of
//     out. Both sides follow the same steps in the same order over the same
//     cache bits up to 128 positions; they differ only in the order each dot
//     product's HS terms are added and in the last bits of exp (a few ulps
//     of each score), and the output is a weighted mean of the values.
//     Longer sequences are attended in splits of 128 positions merged by
//     log-sum-exp (split-K), a few more roundings of the same size. Each
//     token's row must also be bitwise the one it gets attended alone (the
//     splits never depend on the batch). With bf16 queries and output (bf16
//     activations) the output is the fp32 call's on the widened queries,
//     rounded once to bf16, bitwise.
// out is poisoned with NaN before each run, so an element no kernel wrote
// fails; a second run must give the same bits. Indices outside the tables or
// the cache (which only the kernels can see) are skipped (a slot) or give NaN
// (a query), leaving the other tokens correct.
//
// Without a GPU every test that needs one skips with the reason; the argument
// checks still run. Inputs come from Philox (seed 20240607, or
// LADDER_GPU_TEST_SEED), so a failure reproduces.
#include "src/backend/cuda/paged_attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/philox.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

constexpr double kOutTol = 2e-5;  // |gpu - ref| <= kOutTol * (1 + |ref|)
constexpr int64_t kBlockRows = 16;

template <typename T>
using GpuArray = gpu_test::GpuBuffer<T>;

struct Case {
  int64_t NH, HS;
  std::vector<int64_t> lengths;  // of each sequence, after the write
  int64_t chunk;                 // query tokens of sequence 0 (its last positions)
  bool int8;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.int8 ? "int8" : "fp32") << " NH=" << c.NH << " HS=" << c.HS << " lengths=";
  for (int64_t l : c.lengths) *os << l << " ";
  *os << "chunk=" << c.chunk;
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string lens;
  for (int64_t l : c.lengths) absl::StrAppend(&lens, "_", l);
  return absl::StrCat(c.int8 ? "int8" : "fp32", "_NH", c.NH, "_HS", c.HS, "_len", lens, "_chunk",
                      c.chunk);
}

// A scenario: sequences of the case's lengths, their blocks scattered over
// a cache with spare blocks; every position's qkv row; the query tokens.
struct Scenario {
  int64_t S = 0, C = 0, max_blocks = 0, num_seqs = 0;
  std::vector<int32_t> tables;      // [num_seqs, max_blocks], -1 beyond a sequence
  std::vector<float> write_qkv;     // [W, 3C]: every position of every sequence
  std::vector<int32_t> write_slot;  // [W]
  std::vector<float> query_qkv;     // [N, 3C]
  std::vector<int32_t> seq, pos;    // [N]
};

Scenario Build(const Case& c) {
  Scenario s;
  s.C = c.NH * c.HS;
  s.num_seqs = static_cast<int64_t>(c.lengths.size());
  int64_t used = 0;
  for (int64_t len : c.lengths) {
    const int64_t blocks = (len + kBlockRows - 1) / kBlockRows;
    s.max_blocks = std::max(s.max_blocks, blocks);
    used += blocks;
  }
  s.max_blocks += 1;                    // a spare column of -1 entries
  const int64_t num_blocks = used + 3;  // spare blocks, never referenced
  s.S = num_blocks * kBlockRows;
  // Shuffled block ids (a fixed permutation from Philox).
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  PhiloxStream rng(gpu_test::Seed(), 977);
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.NextU32() % i]);
  s.tables.assign(static_cast<size_t>(s.num_seqs * s.max_blocks), -1);
  size_t next = 0;
  const int64_t C3 = 3 * s.C;
  uint64_t stream = 1000;
  for (int64_t q = 0; q < s.num_seqs; ++q) {
    const int64_t len = c.lengths[q];
    for (int64_t b = 0; b * kBlockRows < len; ++b) s.tables[q * s.max_blocks + b] = ids[next++];
    const std::vector<float> rows = gpu_test::Normal(len * C3, stream++, 0.0f, 1.0f);
    s.write_qkv.insert(s.write_qkv.end(), rows.begin(), rows.end());
    for (int64_t p = 0; p < len; ++p) {
      s.write_slot.push_back(static_cast<int32_t>(
          s.tables[q * s.max_blocks + p / kBlockRows] * kBlockRows + p % kBlockRows));
    }
    // Queries: the last `chunk` positions of sequence 0, the last one of the others.
    const int64_t queries = q == 0 ? std::min(c.chunk, len) : 1;
    for (int64_t p = len - queries; p < len; ++p) {
      const size_t at = s.write_qkv.size() - static_cast<size_t>((len - p) * C3);
      s.query_qkv.insert(s.query_qkv.end(), s.write_qkv.begin() + at,
                         s.write_qkv.begin() + at + C3);
      s.seq.push_back(static_cast<int32_t>(q));
      s.pos.push_back(static_cast<int32_t>(p));
    }
  }
  return s;
}

class PagedAttentionGpuTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_P(PagedAttentionGpuTest, MatchesCpu) {
  const Case& c = GetParam();
  const int nh = static_cast<int>(c.NH);
  Scenario s = Build(c);
  const int64_t S = s.S, C = s.C, C3 = 3 * C, NH = c.NH;
  const int64_t W = static_cast<int64_t>(s.write_slot.size());
  const int64_t N = static_cast<int64_t>(s.seq.size());

  // Caches: the same non-zero fill on both sides.
  std::vector<float> kf(S * C, 7.0f), vf(S * C, -7.0f), ks(S * NH, 5.0f), vs(S * NH, 5.0f);
  std::vector<int8_t> k8(S * C, 99), v8(S * C, -99);
  auto cpu_cache = [&]() {
    PagedKv kv;
    if (c.int8) {
      kv.k = Tensor::I8(k8.data(), {S, C}, Device::kCpu);
      kv.v = Tensor::I8(v8.data(), {S, C}, Device::kCpu);
      kv.k_scale = Tensor::F32(ks.data(), {S, NH}, Device::kCpu);
      kv.v_scale = Tensor::F32(vs.data(), {S, NH}, Device::kCpu);
    } else {
      kv.k = Tensor::F32(kf.data(), {S, C}, Device::kCpu);
      kv.v = Tensor::F32(vf.data(), {S, C}, Device::kCpu);
    }
    return kv;
  };
  GpuArray<float> kf_g(kf), vf_g(vf), ks_g(ks), vs_g(vs);
  GpuArray<int8_t> k8_g(k8), v8_g(v8);
  PagedKv gpu_kv;
  if (c.int8) {
    gpu_kv.k = k8_g.View({S, C});
    gpu_kv.v = v8_g.View({S, C});
    gpu_kv.k_scale = ks_g.View({S, NH});
    gpu_kv.v_scale = vs_g.View({S, NH});
  } else {
    gpu_kv.k = kf_g.View({S, C});
    gpu_kv.v = vf_g.View({S, C});
  }

  // ---- KvCacheWrite ----
  CpuBackend cpu;
  std::vector<float> wq_c = s.write_qkv;
  std::vector<int32_t> slot_c = s.write_slot;
  const PagedKv cpu_kv = cpu_cache();
  ASSERT_TRUE(cpu.KvCacheWrite(cpu_kv, Tensor::F32(wq_c.data(), {W, C3}, Device::kCpu),
                               Tensor::I32(slot_c.data(), {W}, Device::kCpu), nh)
                  .ok());
  GpuArray<float> wq_g(s.write_qkv);
  GpuArray<int32_t> slot_g(s.write_slot);
  absl::Status st = cuda::KvCacheWrite(gpu_kv, wq_g.View({W, C3}), slot_g.View({W}), nh);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  if (c.int8) {
    EXPECT_TRUE(k8_g.Download() == k8) << "int8 k cache differs from the CPU's";
    EXPECT_TRUE(v8_g.Download() == v8) << "int8 v cache differs from the CPU's";
    gpu_test::ExpectBitwise("k scales vs the CPU", ks_g.Download(), ks);
    gpu_test::ExpectBitwise("v scales vs the CPU", vs_g.Download(), vs);
  } else {
    gpu_test::ExpectBitwise("fp32 k cache vs the CPU", kf_g.Download(), kf);
    gpu_test::ExpectBitwise("fp32 v cache vs the CPU", vf_g.Download(), vf);
  }

  // ---- PagedAttentionForward, both sides on their (bitwise equal) caches ----
  std::vector<float> qq_c = s.query_qkv, out_c(N * C);
  std::vector<int32_t> tab_c = s.tables, seq_c = s.seq, pos_c = s.pos;
  ASSERT_TRUE(cpu.PagedAttentionForward(
                     Tensor::F32(out_c.data(), {N, C}, Device::kCpu), Tensor::F32(qq_c.data(), {N, C3}, Device::kCpu), cpu_kv,
                     Tensor::I32(tab_c.data(), {s.num_seqs, s.max_blocks}, Device::kCpu),
                     Tensor::I32(seq_c.data(), {N}, Device::kCpu), Tensor::I32(pos_c.data(), {N}, Device::kCpu), nh)
                  .ok());
  GpuArray<float> qq_g(s.query_qkv);
  GpuArray<float> out_g(std::vector<float>(N * C));
  GpuArray<int32_t> tab_g(s.tables), seq_g(s.seq), pos_g(s.pos);
  const Tensor tables = tab_g.View({s.num_seqs, s.max_blocks});
  GpuArray<float> scratch_g(
      gpu_test::Poison(cuda::PagedAttentionScratchFloats(qq_g.View({N, C3}), tables, nh)));
  auto attend = [&]() {
    out_g.Upload(gpu_test::Poison(N * C));
    return cuda::PagedAttentionForward(out_g.View({N, C}), qq_g.View({N, C3}), gpu_kv, tables,
                                       seq_g.View({N}), pos_g.View({N}), nh,
                                       scratch_g.View({scratch_g.size()}));
  };
  st = attend();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = out_g.Download();
  gpu_test::ExpectClose("out", out, out_c, kOutTol, kOutTol);

  st = attend();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  gpu_test::ExpectBitwise("out, second run", out_g.Download(), out);

  // Each token alone: the same bits as in the batch.
  for (int64_t n = 0; n < N; ++n) {
    GpuArray<float> one_q(
        std::vector<float>(s.query_qkv.begin() + n * C3, s.query_qkv.begin() + (n + 1) * C3));
    GpuArray<int32_t> one_seq(std::vector<int32_t>{s.seq[n]}),
        one_pos(std::vector<int32_t>{s.pos[n]});
    GpuArray<float> one_out(gpu_test::Poison(C));
    st = cuda::PagedAttentionForward(one_out.View({1, C}), one_q.View({1, C3}), gpu_kv, tables,
                                     one_seq.View({1}), one_pos.View({1}), nh,
                                     scratch_g.View({scratch_g.size()}));
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    gpu_test::ExpectBitwise(absl::StrCat("token ", n, " alone"), one_out.Download(),
                            std::vector<float>(out.begin() + n * C, out.begin() + (n + 1) * C));
  }

  // bf16 activations: bf16 queries give the fp32 call's output on the same
  // (widened) queries, rounded once to bf16, bit for bit.
  const std::vector<float> q16 = gpu_test::Bf16Rounded(s.query_qkv);
  qq_g.Upload(q16);
  st = attend();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> want16 = gpu_test::Bf16Rounded(out_g.Download());
  gpu_test::GpuStored q16_g(q16, DType::kBF16), out16_g(gpu_test::Poison(N * C), DType::kBF16);
  st = cuda::PagedAttentionForward(out16_g.View({N, C}), q16_g.View({N, C3}), gpu_kv, tables,
                                   seq_g.View({N}), pos_g.View({N}), nh,
                                   scratch_g.View({scratch_g.size()}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  gpu_test::ExpectBitwise("bf16 out", out16_g.Download(), want16);
}

// Head sizes 24 (a partial lane chunk), 32, 48, 64 and 25 (odd); NH = 1;
// sequence lengths 1, 16 (exactly one block), 17, 40, 75, 300 and 600
// (ending mid-block); query tokens N as commented (mostly odd).
INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionGpuTest, testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (bool int8 : {false, true}) {
                             cases.push_back({2, 32, {40, 1, 16}, 3, int8});     // N = 5
                             cases.push_back({1, 64, {17}, 1, int8});            // N = 1
                             cases.push_back({3, 24, {75, 33, 5}, 5, int8});     // N = 7
                             cases.push_back({2, 48, {16, 31}, 16, int8});       // N = 17
                             cases.push_back({1, 25, {20, 9, 2, 50}, 1, int8});  // N = 4
                             cases.push_back({2, 64, {300, 7}, 2, int8});        // N = 3, 19 blocks
                             // Split-K: 128 positions (one split) and 129
                             // (two), then 600 (five, the last partial).
                             cases.push_back({1, 64, {129, 600}, 2, int8});  // N = 3
                           }
                           return cases;
                         }()),
                         CaseName);

// Indices only the kernels can check: a slot outside the cache is not
// written; a query whose sequence, position or block is out of range gets
// NaN; the other tokens are unaffected.
TEST_F(PagedAttentionGpuTest, OutOfRangeIndicesAreContained) {
  const int64_t NH = 2, HS = 32, C = NH * HS, C3 = 3 * C, S = 2 * kBlockRows;
  const std::vector<float> qkv = gpu_test::Normal(6 * C3, 5, 0.0f, 1.0f);
  std::vector<float> k(S * C, 3.0f), v(S * C, 3.0f);
  GpuArray<float> k_g(k), v_g(v), qkv_g(qkv);
  PagedKv kv;
  kv.k = k_g.View({S, C});
  kv.v = v_g.View({S, C});
  // Tokens 0 and 3 go to rows 0 and 1; tokens 1 and 2 have bad slots.
  GpuArray<int32_t> slots(std::vector<int32_t>{0, -1, static_cast<int32_t>(S), 1});
  absl::Status st = cuda::KvCacheWrite(kv, qkv_g.View({4, C3}), slots.View({4}), 2);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> k_after = k_g.Download();
  for (int64_t ch = 0; ch < C; ++ch) {
    k[ch] = qkv[C + ch];               // token 0 -> row 0
    k[C + ch] = qkv[3 * C3 + C + ch];  // token 3 -> row 1
  }
  gpu_test::ExpectBitwise("k cache (only rows 0 and 1 change)", k_after, k);

  // Sequence 0 over block 0 (positions 0, 1 valid); sequence 1 over block
  // 7 (outside the 2-block cache); sequence 2 over blocks 0, 1, 0, 1, ...
  // for its first 128 positions (one split), then block 7. Queries 0 and 5
  // are fine; query 1 names sequence 5, query 2 position 144 (table column
  // 9, outside max_blocks = 9), query 3 uses sequence 1, and query 4 reads
  // block 7 in its second split.
  std::vector<int32_t> t(3 * 9, -1);
  t[0] = 0;
  t[9] = 7;
  for (int b = 0; b < 8; ++b) t[18 + b] = b % 2;
  t[26] = 7;
  GpuArray<int32_t> tables(t);  // [3 sequences, 9 blocks]
  GpuArray<int32_t> seq(std::vector<int32_t>{0, 5, 0, 1, 2, 2});
  GpuArray<int32_t> pos(std::vector<int32_t>{1, 0, 144, 0, 130, 127});
  GpuArray<float> out(std::vector<float>(6 * C, 0.0f));
  GpuArray<float> scratch(std::vector<float>(
      cuda::PagedAttentionScratchFloats(qkv_g.View({6, C3}), tables.View({3, 9}), 2)));
  st = cuda::PagedAttentionForward(out.View({6, C}), qkv_g.View({6, C3}), kv, tables.View({3, 9}),
                                   seq.View({6}), pos.View({6}), 2, scratch.View({scratch.size()}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> o = out.Download();
  for (int64_t ch = 0; ch < C; ++ch) {
    EXPECT_FALSE(std::isnan(o[ch])) << "token 0 channel " << ch;
    EXPECT_FALSE(std::isnan(o[5 * C + ch])) << "token 5 channel " << ch;
    for (int q = 1; q < 5; ++q) EXPECT_TRUE(std::isnan(o[q * C + ch])) << "token " << q;
  }
}

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(PagedAttentionGpuArgs, RejectsBadArguments) {
  float fake[4];  // never dereferenced: every call below fails validation
  auto f32 = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kF32, dims, Device::kCuda);
  };
  auto i32 = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kI32, dims, Device::kCuda);
  };
  auto i8 = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kI8, dims, Device::kCuda);
  };
  PagedKv kv;
  kv.k = f32({32, 64});
  kv.v = f32({32, 64});

  absl::Status s = cuda::KvCacheWrite(kv, f32({3, 192}), i32({3}), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "3 heads do not divide 64";
  s = cuda::KvCacheWrite(kv, f32({3, 190}), i32({3}), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "qkv not 3C wide";
  s = cuda::KvCacheWrite(kv, f32({3, 192}), i32({2}), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "slots of the wrong length";
  s = cuda::KvCacheWrite(kv, Tensor::F32(fake, {3, 192}, Device::kCpu), i32({3}), 2);
  EXPECT_NE(s.message().find("not a CUDA tensor"), std::string::npos) << s;

  PagedKv kv8;
  kv8.k = i8({32, 64});
  kv8.v = i8({32, 64});
  kv8.k_scale = f32({32, 2});
  kv8.v_scale = f32({32, 3});
  s = cuda::KvCacheWrite(kv8, f32({3, 192}), i32({3}), 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "v scales [S, 3] for 2 heads";

  const Tensor scratch = f32({1 << 20});
  s = cuda::PagedAttentionForward(f32({3, 64}), f32({3, 192}), kv, i32({2, 4}), i32({3}), i32({2}),
                                  2, scratch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "pos of the wrong length";
  s = cuda::PagedAttentionForward(f32({3, 60}), f32({3, 192}), kv, i32({2, 4}), i32({3}), i32({3}),
                                  2, scratch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "out of the wrong width";
  // 3 tokens x 2 heads x 1 split x (32 + 2) floats of partials.
  EXPECT_EQ(cuda::PagedAttentionScratchFloats(f32({3, 192}), i32({2, 4}), 2), 3 * 2 * 34);
  s = cuda::PagedAttentionForward(f32({3, 64}), f32({3, 192}), kv, i32({2, 4}), i32({3}), i32({3}),
                                  2, f32({3 * 2 * 34 - 1}));
  EXPECT_NE(s.message().find("scratch"), std::string::npos) << s;
}

}  // namespace
}  // namespace ladder
