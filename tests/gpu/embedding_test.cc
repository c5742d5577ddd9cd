// The CUDA embedding kernels (kernels/embedding.cu) against the CPU reference
// and against a plain loop:
//  - MatchesCpu: positions n % T (what CpuBackend's op derives from [B,T]
//    tokens), whole and sharded tables (tokens outside the shard contribute
//    nothing), with and without wpe, aligned and misaligned views; shapes from
//    N = 1, C = 1 to several 256-row tiles of the backward's sort, C not a
//    multiple of 4, vocabularies needing 1, 2 and 3 radix passes, and a
//    vocabulary of 3 tokens (long runs of equal ids across tiles).
//  - ExplicitPositions: shuffled, repeated and out-of-range positions and
//    negative / out-of-shard tokens, against a loop written in this file.
// Both run in each storage dtype: f32, and bf16 (out, wte and wpe bf16 in the
// forward, dout bf16 in the backward; dwte and dwpe are f32 either way). For
// bf16 the inputs are rounded to bf16 first (Bf16Rounded) and the reference
// is computed in fp32 on those rounded values, so both sides see the same
// numbers. Outputs are poisoned with NaN first; the gradients start from
// random values (they accumulate).
//
// Tolerance: none. The forward is at most one fp32 add per element, and the
// backward adds each id's rows in row order onto the old value, exactly the
// CPU's loop: every comparison is bitwise. With bf16 storage the forward's
// output is the reference rounded once to nearest even (Bf16Rounded(ref),
// i.e. within kBf16Rounding = 2^-8 |ref| of it, and exactly the same bits as
// the kernel's single rounding of the same fp32 sum), and the fp32 gradients
// from a bf16 dout are bitwise the CPU's sums of the same rounded values. The
// backward is also run twice and compared bitwise (determinism). Mixed
// dtypes (a bf16 table with an f32 out, and the reverse; a bf16 gradient
// table) are InvalidArgument.
#include "src/backend/cuda/embedding.h"

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::Bf16Rounded;
using gpu_test::ExpectBitwise;
using gpu_test::GpuFloats;
using gpu_test::GpuInts;
using gpu_test::GpuStored;
using gpu_test::Normal;
using gpu_test::Poison;
using gpu_test::UniformInts;


// Values as a device storing `dt` holds them: rounded to bf16 for bf16.
std::vector<float> Stored(std::vector<float> x, DType dt) {
  return dt == DType::kBF16 ? Bf16Rounded(std::move(x)) : x;
}

struct Case {
  int64_t B, T, C;
  int64_t V;            // tokens drawn from [0, V)
  int64_t vocab_start;  // the shard: [vocab_start, vocab_start + vshard)
  int64_t vshard;
  int64_t max_t;   // wpe rows (>= T); 0: no wpe
  int64_t offset;  // element offset of the GPU views (1: misaligned)
};

std::string CaseName(const Case& c) {
  return absl::StrCat("B", c.B, "_T", c.T, "_C", c.C, "_V", c.V, "_shard", c.vocab_start, "_",
                      c.vshard, c.max_t ? absl::StrCat("_wpe", c.max_t) : "_nowpe",
                      c.offset ? "_misaligned" : "");
}

// How gtest prints a failing case: its name.
void PrintTo(const Case& c, std::ostream* os) { *os << CaseName(c); }

using Param = std::tuple<Case, DType>;

class EmbeddingGpuTest : public gpu_test::GpuTest, public testing::WithParamInterface<Param> {};

TEST_P(EmbeddingGpuTest, MatchesCpu) {
  const Case c = std::get<0>(GetParam());
  const DType dt = std::get<1>(GetParam());
  const int64_t N = c.B * c.T, C = c.C;
  const uint64_t s = static_cast<uint64_t>(N * 131 + C * 7 + c.vshard) * 16;
  std::vector<int32_t> tokens = UniformInts(N, s, 0, c.V);
  std::vector<int32_t> positions(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) positions[n] = static_cast<int32_t>(n % c.T);
  std::vector<float> wte = Stored(Normal(c.vshard * C, s + 1), dt);
  std::vector<float> wpe = Stored(Normal(std::max<int64_t>(c.max_t, 1) * C, s + 2), dt);
  const std::vector<float> dout = Stored(Normal(N * C, s + 3), dt);
  const std::vector<float> dwte0 = Normal(c.vshard * C, s + 4);
  const std::vector<float> dwpe0 = Normal(std::max<int64_t>(c.max_t, 1) * C, s + 5);
  const bool has_wpe = c.max_t > 0;

  // ---- CPU reference (positions n % T, explicit) ----
  CpuBackend cpu;
  std::vector<float> out_ref(N * C), dwte_ref = dwte0, dwpe_ref = dwpe0, dout_c = dout;
  const Tensor tok_c = Tensor::I32(tokens.data(), {c.B, c.T}, Device::kCpu);
  const Tensor pos_c = Tensor::I32(positions.data(), {c.B, c.T}, Device::kCpu);
  const Tensor wpe_c = has_wpe ? Tensor::F32(wpe.data(), {c.max_t, C}, Device::kCpu) : Tensor();
  absl::Status st = cpu.EmbeddingForward(
      Tensor::F32(out_ref.data(), {c.B, c.T, C}, Device::kCpu), tok_c, pos_c,
      Tensor::F32(wte.data(), {c.vshard, C}, Device::kCpu), wpe_c, c.vocab_start);
  ASSERT_TRUE(st.ok()) << st;
  st = cpu.EmbeddingBackward(
      Tensor::F32(dwte_ref.data(), {c.vshard, C}, Device::kCpu),
      has_wpe ? Tensor::F32(dwpe_ref.data(), {c.max_t, C}, Device::kCpu) : Tensor(),
      Tensor::F32(dout_c.data(), {c.B, c.T, C}, Device::kCpu), tok_c, pos_c, c.vocab_start);
  ASSERT_TRUE(st.ok()) << st;
  if (dt == DType::kBF16) out_ref = Bf16Rounded(out_ref);  // the one rounding of the sum

  // ---- GPU ----
  GpuInts tok_g(tokens), pos_g(positions);
  GpuStored wte_g(wte, dt, c.offset), wpe_g(wpe, dt, c.offset), out_g(Poison(N * C), dt, c.offset);
  GpuStored dout_g(dout, dt, c.offset);
  GpuFloats dwte_g(dwte0, c.offset), dwpe_g(dwpe0, c.offset);
  GpuInts scratch(std::max<int64_t>(1, cuda::EmbeddingBackwardScratchInts(N)));
  for (bool ok : {tok_g.ok(), pos_g.ok(), wte_g.ok(), wpe_g.ok(), out_g.ok(), dout_g.ok(),
                  dwte_g.ok(), dwpe_g.ok(), scratch.ok()}) {
    ASSERT_TRUE(ok) << "cudaMalloc failed";
  }
  const Tensor wpe_t = has_wpe ? wpe_g.View({c.max_t, C}) : Tensor();
  st = cuda::EmbeddingForward(out_g.View({c.B, c.T, C}), tok_g.View({c.B, c.T}),
                              pos_g.View({c.B, c.T}), wte_g.View({c.vshard, C}), wpe_t,
                              c.vocab_start);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("out", out_g.Download(), out_ref);

  auto backward = [&]() {
    dwte_g.Upload(dwte0);
    dwpe_g.Upload(dwpe0);
    return cuda::EmbeddingBackward(dwte_g.View({c.vshard, C}),
                                   has_wpe ? dwpe_g.View({c.max_t, C}) : Tensor(),
                                   dout_g.View({N, C}), tok_g.View({N}), pos_g.View({N}),
                                   c.vocab_start, scratch.View({scratch.size()}));
  };
  st = backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> dwte = dwte_g.Download(), dwpe = dwpe_g.Download();
  ExpectBitwise("dwte", dwte, dwte_ref);
  if (has_wpe) ExpectBitwise("dwpe", dwpe, dwpe_ref);

  st = backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("dwte, second run", dwte_g.Download(), dwte);
  ExpectBitwise("dwpe, second run", dwpe_g.Download(), dwpe);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmbeddingGpuTest,
    testing::Combine(testing::Values(
                         // B, T, C, V, vocab_start, vshard, maxT, offset. 16-byte vectors
                         // when aligned and C % 4 == 0 (f32) or C % 8 == 0 (bf16): C = 36 and
                         // 20 are vectors in f32, scalars in bf16.
                         Case{1, 1, 1, 7, 0, 7, 1, 0},             // N = 1, C = 1
                         Case{1, 1, 768, 1000, 0, 1000, 1024, 0},  // one token, GPT-2 width
                         Case{2, 5, 1, 10, 0, 10, 5, 0},           // C = 1, repeated tokens
                         Case{4, 8, 99, 300, 0, 300, 8, 0},        // C not a multiple of 4: scalar
                         Case{4, 8, 64, 300, 0, 300, 0, 0},        // no wpe
                         Case{3, 100, 36, 3, 0, 3, 128, 0},  // 3 tokens: long runs across tiles
                         Case{3, 100, 36, 50304, 0, 50304, 100, 0},  // 2 radix passes, 2 tiles
                         Case{2, 300, 20, 70000, 0, 70000, 300, 0},  // 3 radix passes (17 bits)
                         Case{5, 111, 40, 500, 100, 200, 111, 0},  // a shard: most tokens elsewhere
                         Case{5, 111, 40, 500, 400, 200, 120, 0},  // the last shard, partly padding
                         Case{6, 50, 64, 1000, 0, 1000, 64,
                              1}),  // misaligned views: scalar kernels
                     testing::Values(DType::kF32, DType::kBF16)),
    [](const testing::TestParamInfo<Param>& info) {
      return absl::StrCat(CaseName(std::get<0>(info.param)), "_",
                          DTypeName(std::get<1>(info.param)));
    });

class EmbeddingExplicitTest : public gpu_test::GpuTest,
                              public testing::WithParamInterface<DType> {};

// Explicit positions: not n % T, repeated, shuffled, and some out of range;
// tokens negative or outside the shard. Expected values from a plain loop.
TEST_P(EmbeddingExplicitTest, ExplicitPositions) {
  const DType dt = GetParam();
  constexpr int64_t N = 613, C = 56, kMaxT = 37, kVocabStart = 50, kVshard = 90;
  const uint64_t s = 9001;
  std::vector<int32_t> tokens = UniformInts(N, s, -20, 200);  // ~40% in the shard
  std::vector<int32_t> positions = UniformInts(N, s + 1, -3, kMaxT + 3);
  positions[0] = INT32_MIN;
  positions[1] = INT32_MAX;
  tokens[2] = INT32_MIN;
  tokens[3] = INT32_MAX;
  const std::vector<float> wte = Stored(Normal(kVshard * C, s + 2), dt);
  const std::vector<float> wpe = Stored(Normal(kMaxT * C, s + 3), dt);
  const std::vector<float> dout = Stored(Normal(N * C, s + 4), dt);
  const std::vector<float> dwte0 = Normal(kVshard * C, s + 5), dwpe0 = Normal(kMaxT * C, s + 6);

  auto row = [&](int32_t tok) {
    const int64_t r = int64_t{tok} - kVocabStart;
    return r >= 0 && r < kVshard ? r : -1;
  };
  auto pos = [&](int32_t p) { return p >= 0 && p < kMaxT ? int64_t{p} : int64_t{-1}; };
  std::vector<float> out_ref(N * C), dwte_ref = dwte0, dwpe_ref = dwpe0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = row(tokens[n]), p = pos(positions[n]);
    for (int64_t ch = 0; ch < C; ++ch) {
      float v = 0.0f;
      if (r >= 0 && p >= 0) {
        v = wte[r * C + ch] + wpe[p * C + ch];
      } else if (r >= 0) {
        v = wte[r * C + ch];
      } else if (p >= 0) {
        v = wpe[p * C + ch];
      }
      out_ref[n * C + ch] = v;
      if (r >= 0) dwte_ref[r * C + ch] += dout[n * C + ch];
      if (p >= 0) dwpe_ref[p * C + ch] += dout[n * C + ch];
    }
  }
  if (dt == DType::kBF16) out_ref = Bf16Rounded(out_ref);

  GpuInts tok_g(tokens), pos_g(positions), scratch(cuda::EmbeddingBackwardScratchInts(N));
  GpuStored wte_g(wte, dt), wpe_g(wpe, dt), out_g(Poison(N * C), dt), dout_g(dout, dt);
  GpuFloats dwte_g(dwte0), dwpe_g(dwpe0);
  absl::Status st =
      cuda::EmbeddingForward(out_g.View({N, C}), tok_g.View({N}), pos_g.View({N}),
                             wte_g.View({kVshard, C}), wpe_g.View({kMaxT, C}), kVocabStart);
  ASSERT_TRUE(st.ok()) << st;
  st = cuda::EmbeddingBackward(dwte_g.View({kVshard, C}), dwpe_g.View({kMaxT, C}),
                               dout_g.View({N, C}), tok_g.View({N}), pos_g.View({N}), kVocabStart,
                               scratch.View({scratch.size()}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("out", out_g.Download(), out_ref);
  ExpectBitwise("dwte", dwte_g.Download(), dwte_ref);
  ExpectBitwise("dwpe", dwpe_g.Download(), dwpe_ref);
}

INSTANTIATE_TEST_SUITE_P(DTypes, EmbeddingExplicitTest, testing::Values(DType::kF32, DType::kBF16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(EmbeddingGpuArgs, RejectsBadArguments) {
  float f[16];
  int32_t i[16];
  auto gf = [&](std::initializer_list<int64_t> dims) {
    return Tensor(f, DType::kF32, dims, Device::kCuda);
  };
  auto gi = [&](std::initializer_list<int64_t> dims) {
    return Tensor(i, DType::kI32, dims, Device::kCuda);
  };
  absl::Status s = cuda::EmbeddingForward(gf({4, 2}), Tensor::I32(i, {4}, Device::kCpu), gi({4}),
                                          gf({8, 2}), Tensor(), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "tokens on the host";
  s = cuda::EmbeddingForward(gf({4, 2}), gi({4}), gi({3}), gf({8, 2}), gf({5, 2}), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "positions of the wrong size";
  s = cuda::EmbeddingForward(gf({4, 2}), gi({4}), gi({4}), gf({8, 2}), gf({5, 3}), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "wpe of the wrong width";
  s = cuda::EmbeddingForward(gf({4, 3}), gi({4}), Tensor(), gf({8, 2}), Tensor(), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "out of the wrong width";
  s = cuda::EmbeddingForward(gf({4, 2}), gi({4}), Tensor(), gf({8, 2}), Tensor(), -1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "negative vocab_start";
  s = cuda::EmbeddingBackward(gf({8, 2}), Tensor(), gf({4, 2}), gi({4}), Tensor(), 0, Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "missing scratch";
  EXPECT_NE(s.message().find("scratch"), std::string::npos) << s;
}

// One storage dtype per forward call (out, wte, wpe); the backward's tables
// are fp32 gradients whatever dout's dtype.
TEST(EmbeddingGpuArgs, RejectsMixedDTypes) {
  float f[16];
  int32_t i[16];
  auto gt = [&](DType dt, std::initializer_list<int64_t> dims) {
    return Tensor(f, dt, dims, Device::kCuda);
  };
  constexpr DType kF = DType::kF32, kH = DType::kBF16;
  const Tensor tok(i, DType::kI32, {4}, Device::kCuda);
  auto expect = [](const absl::Status& s, const std::string& what, const std::string& text) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s;
    EXPECT_NE(s.message().find(text), std::string::npos) << s;
  };
  // bf16 weights into f32 activations: the CPU's serving format, refused here.
  expect(cuda::EmbeddingForward(gt(kF, {4, 2}), tok, tok, gt(kH, {8, 2}), Tensor(), 0), "wte",
         "CPU serving format");
  expect(cuda::EmbeddingForward(gt(kF, {4, 2}), tok, tok, gt(kF, {8, 2}), gt(kH, {5, 2}), 0), "wpe",
         "CPU serving format");
  // f32 weights into bf16 activations.
  expect(cuda::EmbeddingForward(gt(kH, {4, 2}), tok, tok, gt(kF, {8, 2}), Tensor(), 0), "wte",
         "expected bf16 like out");
  expect(cuda::EmbeddingForward(gt(kH, {4, 2}), tok, tok, gt(kH, {8, 2}), gt(kF, {5, 2}), 0), "wpe",
         "expected bf16 like out");
  expect(cuda::EmbeddingForward(gt(kH, {4, 2}), tok, tok, Tensor(), gt(kF, {5, 2}), 0), "wpe",
         "expected bf16 like out");
  expect(cuda::EmbeddingForward(gt(DType::kI32, {4, 2}), tok, tok, gt(DType::kI32, {8, 2}),
                                Tensor(), 0),
         "out", "must be f32 or bf16");
  // The gradients stay f32 (a bf16 dout is fine, see MatchesCpu).
  // Big enough for N = 4 (the calls fail before anything is dereferenced).
  const Tensor scratch(i, DType::kI32, {1024}, Device::kCuda);
  expect(cuda::EmbeddingBackward(gt(kH, {8, 2}), Tensor(), gt(kH, {4, 2}), tok, tok, 0, scratch),
         "dwte", "expected f32");
  expect(
      cuda::EmbeddingBackward(gt(kF, {8, 2}), gt(kH, {5, 2}), gt(kH, {4, 2}), tok, tok, 0, scratch),
      "dwpe", "expected f32");
  expect(cuda::EmbeddingBackward(gt(kF, {8, 2}), Tensor(), gt(DType::kI32, {4, 2}), tok, tok, 0,
                                 scratch),
         "dout", "must be f32 or bf16");
}

}  // namespace
}  // namespace ladder
