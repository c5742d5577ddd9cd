// The CUDA int8-weight kernels (kernels/int8_matmul.cu) against the CPU
// reference (CpuBackend): MatmulInt8Forward and DequantizeRows on random
// weights quantized and packed as the model does (quantize.h QuantizeRows,
// PackInt8Panels), in groups from 32 channels to a whole row, with and
// without a bias, for token counts 1 to 37 (odd ones, and above the CPU's
// 16-token W8A8 limit), C from 64 to 1056 (one 512-channel chunk, several,
// and a partial last chunk), OC a multiple of 16 but not of 32 (a thread
// block's last 16 rows idle). The inputs include an all-zero weight group and
// an all-zero activation block (scale 0).
//
// Tolerance: none. Both ops must equal the CPU bit for bit:
//   MatmulInt8Forward: the GPU performs the CPU's W8A8 float operations in
//     the CPU's order (int8_matmul.cc: exact int32 block dots, one fma per
//     block in block order, then + bias). The CPU computes W8A8 for up to 16
//     tokens per call (above that it switches to fp32 activations through
//     sgemm, a different approximation of the same product), and its W8A8
//     result does not depend on the batch, so the reference is the CPU
//     called on slices of at most 16 tokens.
//   DequantizeRows: one float multiply per element on both sides.
// Outputs are poisoned with NaN first, so an element no kernel wrote fails,
// and a second run must give the same bits. An out-of-range row index (which
// only the kernel can see) gives a row of NaN and leaves the others exact.
//
// W8A16 (bf16 activations, the same cases): no CPU reference exists (the CPU
// stores fp32 activations only), so each output is held to the exact matmul
// over the dequantized weights and the bf16 inputs, in double:
//   |got - want| <= 2^-8 |want| + 2e-5 (sum_c |w[c] x[c]| + |bias|)
// (one bf16 rounding of the result, plus the fp32 sums of the mma parts and
// the fmas: the hardware's order inside an mma is unspecified). And every
// token's row must be the bits of that token run alone (batch independence).
//
// Without a GPU every test that needs one skips with the reason; the argument
// checks still run. Inputs come from Philox (seed 20240607, or
// LADDER_GPU_TEST_SEED), so a failure reproduces.
#include "src/backend/cuda/int8_matmul.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/quantize.h"
#include "src/core/philox.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

constexpr int64_t kCpuW8A8MaxTokens = 16;  // matmul_kernels.h kSmallBatch

template <typename T>
using GpuArray = gpu_test::GpuBuffer<T>;

struct Case {
  int64_t N, C, OC, G;
  bool bias;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "N=" << c.N << " C=" << c.C << " OC=" << c.OC << " G=" << c.G << (c.bias ? " bias" : "");
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("N", c.N, "_C", c.C, "_OC", c.OC, "_G", c.G, c.bias ? "_bias" : "");
}

// Packed int8 weights of a random [OC, C] matrix, groups of G, with
// row 1's first group all zero (scale 0).
struct Weights {
  std::vector<int8_t> q;
  std::vector<float> scales;
};

Weights MakeWeights(int64_t OC, int64_t C, int64_t G, uint64_t stream) {
  std::vector<float> w = gpu_test::Normal(OC * C, stream, 0.0f, 0.05f);
  std::fill(w.begin() + C, w.begin() + C + G, 0.0f);
  std::vector<int8_t> q(OC * C);
  std::vector<float> s(OC * (C / G));
  QuantizeRows(w.data(), OC, C, G, q.data(), s.data());
  Weights p{std::vector<int8_t>(OC * C), std::vector<float>(OC * (C / G))};
  PackInt8Panels(q.data(), s.data(), OC, C, G, p.q.data(), p.scales.data());
  return p;
}

class Int8MatmulGpuTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_P(Int8MatmulGpuTest, MatchesCpuBitwise) {
  const Case& c = GetParam();
  const int64_t N = c.N, C = c.C, OC = c.OC, G = c.G;
  const uint64_t s = static_cast<uint64_t>(((N * 4099 + C) * 131 + OC) * 17 + G) * 4;
  const Weights w = MakeWeights(OC, C, G, s + 0);
  std::vector<float> inp = gpu_test::Normal(N * C, s + 1, 0.0f, 1.0f);
  std::fill(inp.begin(), inp.begin() + 32, 0.0f);  // token 0's first block: scale 0
  const std::vector<float> bias =
      c.bias ? gpu_test::Normal(OC, s + 2, 0.0f, 0.5f) : std::vector<float>();

  // ---- CPU reference, W8A8, in slices of at most 16 tokens ----
  CpuBackend cpu;
  std::vector<int8_t> q_c = w.q;
  std::vector<float> s_c = w.scales, in_c = inp, b_c = bias, out_c(N * OC);
  const int64_t groups = C / G;
  for (int64_t n0 = 0; n0 < N; n0 += kCpuW8A8MaxTokens) {
    const int64_t n = std::min(kCpuW8A8MaxTokens, N - n0);
    ASSERT_TRUE(cpu.MatmulInt8Forward(Tensor::F32(out_c.data() + n0 * OC, {n, OC}, Device::kCpu),
                                      Tensor::F32(in_c.data() + n0 * C, {n, C}, Device::kCpu),
                                      Tensor::I8(q_c.data(), {OC, C}, Device::kCpu),
                                      Tensor::F32(s_c.data(), {OC, groups}, Device::kCpu),
                                      c.bias ? Tensor::F32(b_c.data(), {OC}, Device::kCpu) : Tensor())
                    .ok());
  }

  // ---- GPU ----
  GpuArray<int8_t> q_g(w.q);
  GpuArray<float> s_g(w.scales), in_g(inp), b_g(bias), out_g(gpu_test::Poison(N * OC));
  for (bool ok : {q_g.ok(), s_g.ok(), in_g.ok(), b_g.ok(), out_g.ok()}) {
    ASSERT_TRUE(ok) << "cudaMalloc failed";
  }
  auto run = [&]() {
    out_g.Upload(gpu_test::Poison(N * OC));
    return cuda::MatmulInt8Forward(out_g.View({N, OC}), in_g.View({N, C}), q_g.View({OC, C}),
                                   s_g.View({OC, groups}), c.bias ? b_g.View({OC}) : Tensor());
  };
  absl::Status st = run();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = out_g.Download();
  gpu_test::ExpectBitwise("out", out, out_c);
  st = run();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  gpu_test::ExpectBitwise("out (second run)", out_g.Download(), out);

  // ---- DequantizeRows: every row once in a shuffled order, then repeats ----
  std::vector<int32_t> rows;
  for (int64_t r = 0; r < OC; ++r) rows.push_back(static_cast<int32_t>((r * 7 + 3) % OC));
  rows.push_back(1);
  rows.push_back(static_cast<int32_t>(OC - 1));
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<int32_t> rows_c = rows;
  std::vector<float> deq_c(R * C);
  ASSERT_TRUE(cpu.DequantizeRows(Tensor::F32(deq_c.data(), {R, C}, Device::kCpu), Tensor::I8(q_c.data(), {OC, C}, Device::kCpu),
                                 Tensor::F32(s_c.data(), {OC, groups}, Device::kCpu),
                                 Tensor::I32(rows_c.data(), {R}, Device::kCpu))
                  .ok());
  GpuArray<int32_t> rows_g(rows);
  GpuArray<float> deq_g(gpu_test::Poison(R * C));
  st = cuda::DequantizeRows(deq_g.View({R, C}), q_g.View({OC, C}), s_g.View({OC, groups}),
                            rows_g.View({R}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  gpu_test::ExpectBitwise("DequantizeRows", deq_g.Download(), deq_c);
}

TEST_P(Int8MatmulGpuTest, W8A16WithinBf16RoundingAndIndependentOfBatch) {
  const Case& c = GetParam();
  const int64_t N = c.N, C = c.C, OC = c.OC, G = c.G, groups = C / G;
  const uint64_t s = static_cast<uint64_t>(((N * 4099 + C) * 131 + OC) * 17 + G) * 4 + 1000;
  const Weights w = MakeWeights(OC, C, G, s + 0);
  const std::vector<float> inp = gpu_test::Bf16Rounded(gpu_test::Normal(N * C, s + 1));
  const std::vector<float> bias =
      c.bias ? gpu_test::Normal(OC, s + 2, 0.0f, 0.5f) : std::vector<float>();
  GpuArray<int8_t> q_g(w.q);
  GpuArray<float> s_g(w.scales), b_g(bias);
  gpu_test::GpuStored in_g(inp, DType::kBF16), out_g(gpu_test::Poison(N * OC), DType::kBF16);
  for (bool ok : {q_g.ok(), s_g.ok(), b_g.ok(), in_g.ok(), out_g.ok()}) {
    ASSERT_TRUE(ok) << "cudaMalloc failed";
  }
  const Tensor bias_t = c.bias ? b_g.View({OC}) : Tensor();
  absl::Status st = cuda::MatmulInt8Forward(out_g.View({N, OC}), in_g.View({N, C}),
                                            q_g.View({OC, C}), s_g.View({OC, groups}), bias_t);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = out_g.Download();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double want = c.bias ? bias[o] : 0.0, mag = std::fabs(want);
      for (int64_t k = 0; k < C; ++k) {
        const double p = static_cast<double>(w.q[Int8PanelIndex(o, k, C)]) *
                         w.scales[Int8PanelScaleIndex(o, k / G, groups)] * inp[n * C + k];
        want += p;
        mag += std::fabs(p);
      }
      const double got = out[n * OC + o];
      ASSERT_LE(std::fabs(got - want), gpu_test::kBf16Rounding * std::fabs(want) + 2e-5 * mag)
          << "token " << n << ", row " << o << ": got " << got << ", want " << want;
    }
  }
  // Each token alone gives the bits it got inside the batch.
  for (int64_t n : {int64_t{0}, N / 2, N - 1}) {
    const std::vector<float> row(inp.begin() + n * C, inp.begin() + (n + 1) * C);
    gpu_test::GpuStored row_g(row, DType::kBF16), alone_g(gpu_test::Poison(OC), DType::kBF16);
    st = cuda::MatmulInt8Forward(alone_g.View({1, OC}), row_g.View({1, C}), q_g.View({OC, C}),
                                 s_g.View({OC, groups}), bias_t);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    gpu_test::ExpectBitwise(absl::StrCat("token ", n, " alone"), alone_g.Download(),
                            std::vector<float>(out.begin() + n * OC, out.begin() + (n + 1) * OC));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8MatmulGpuTest,
                         testing::Values(Case{1, 64, 16, 32, false},     // decode, tiny
                                         Case{1, 768, 48, 768, true},    // G = C, OC % 32 = 16
                                         Case{5, 96, 32, 32, true},      // 3 groups
                                         Case{7, 1024, 64, 256, false},  // 2 whole chunks
                                         Case{3, 544, 80, 32, true},     // partial last chunk
                                         Case{16, 640, 32, 64, true},    // the CPU's W8A8 limit
                                         Case{37, 1056, 48, 96, true}),  // > 16 tokens, 3 tiles
                         CaseName);

// Row indices only the kernel can check: an out-of-range row gives NaN, the
// others stay exact.
TEST_F(Int8MatmulGpuTest, DequantizeRowsOutOfRange) {
  const int64_t OC = 32, C = 64, G = 32;
  const Weights w = MakeWeights(OC, C, G, 99);
  GpuArray<int8_t> q_g(w.q);
  GpuArray<float> s_g(w.scales), out_g(gpu_test::Poison(3 * C));
  GpuArray<int32_t> rows_g(std::vector<int32_t>{5, -1, static_cast<int32_t>(OC)});
  absl::Status st = cuda::DequantizeRows(out_g.View({3, C}), q_g.View({OC, C}),
                                         s_g.View({OC, C / G}), rows_g.View({3}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = out_g.Download();
  for (int64_t c = 0; c < C; ++c) {
    const float want = static_cast<float>(w.q[Int8PanelIndex(5, c, C)]) *
                       w.scales[Int8PanelScaleIndex(5, c / G, C / G)];
    EXPECT_EQ(out[c], want) << "row 5, channel " << c;
    EXPECT_TRUE(std::isnan(out[C + c]) && std::isnan(out[2 * C + c])) << "channel " << c;
  }
}

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(Int8MatmulGpuArgs, RejectsBadArguments) {
  alignas(16) float fake[4];  // never dereferenced: every call below fails validation
  auto f32 = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kF32, dims, Device::kCuda);
  };
  auto i8 = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kI8, dims, Device::kCuda);
  };

  absl::Status s =
      cuda::MatmulInt8Forward(f32({2, 24}), f32({2, 64}), i8({24, 64}), f32({24, 2}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "OC = 24 is not whole panels";
  s = cuda::MatmulInt8Forward(f32({2, 32}), f32({2, 64}), i8({32, 64}), f32({32, 3}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "3 groups do not divide 64";
  s = cuda::MatmulInt8Forward(f32({2, 32}), f32({2, 96}), i8({32, 96}), f32({32, 2}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "groups of 48 channels";
  s = cuda::MatmulInt8Forward(f32({2, 32}), f32({2, 60}), i8({32, 64}), f32({32, 2}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "inp width differs";
  s = cuda::MatmulInt8Forward(f32({2, 32}), f32({2, 64}), i8({32, 64}), f32({32, 2}), f32({31}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bias length";
  s = cuda::MatmulInt8Forward(
      f32({2, 32}), f32({2, 64}),
      Tensor(reinterpret_cast<int8_t*>(fake) + 1, DType::kI8, {32, 64}, Device::kCuda),
      f32({32, 2}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "q not 4-byte aligned";
  s = cuda::MatmulInt8Forward(f32({2, 32}), Tensor::F32(fake, {2, 64}, Device::kCpu), i8({32, 64}), f32({32, 2}),
                              Tensor());
  EXPECT_NE(s.message().find("not a CUDA tensor"), std::string::npos) << s;

  s = cuda::DequantizeRows(f32({2, 60}), i8({32, 64}), f32({32, 2}),
                           Tensor(fake, DType::kI32, {2}, Device::kCuda));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "out width differs";
  s = cuda::DequantizeRows(f32({2, 64}), i8({32, 64}), f32({32, 2}),
                           Tensor(fake, DType::kI32, {3}, Device::kCuda));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "rows of the wrong length";
}

}  // namespace
}  // namespace ladder
