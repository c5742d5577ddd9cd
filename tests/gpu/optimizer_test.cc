// The CUDA optimizer kernels (kernels/optimizer.cu) against the CPU
// reference (CpuBackend):
//  - SumOfSquares for n = 0, 1, odd sizes, sizes around a block's work and
//    a large one (many blocks); aligned and misaligned x must give the same
//    bits (the order of the adds depends only on n), and a second run too.
//  - AdamW over a list of tensors in ONE launch: sizes 1, 3, 0 (empty, in the
//    middle and at the end), one chunk exactly, one chunk plus one element,
//    several chunks with a tail, a misaligned tensor (scalar path), each with
//    its own weight decay; two steps (bias corrections of step 1 and 2),
//    each compared with CpuBackend::AdamWUpdate on every tensor.
// Outputs are poisoned with NaN first (the sum's output float).
//
// Tolerances:
//   SumOfSquares: |gpu - ref| <= 1e-6 |ref|, ref the CPU's double result.
//     Both accumulate in double (in different orders), and the GPU rounds to
//     float once: the float is the correctly rounded sum or its neighbour.
//   AdamW: none, bit for bit. Both sides compile one definition of the
//     element (kernels/adamw_element.h), written so no compiler fuses a
//     multiply and an add; sqrt and division are IEEE-rounded on both. That
//     equality is what lets optimizer offload run the update on the host.
//  - Mixed precision: RoundToBf16 (to nearest and stochastic) bit for bit
//    against the host's definitions on values that reach every branch
//    (zeros, subnormals, ties, the largest finite bf16, infinities, NaN);
//    AdamW's bf16 copy bit for bit against the stochastic rounding of the
//    parameter the same kernel wrote (on the device and on the CPU); and
//    on the host, that stochastic rounding is unbiased (its mean over many
//    words is the input within 5 standard errors).
#include "src/backend/cuda/optimizer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/bf16.h"
#include "src/core/philox.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::ExpectBitwise;
using gpu_test::ExpectClose;
using gpu_test::GpuFloats;
using gpu_test::Normal;
using gpu_test::Poison;

constexpr double kSumRel = 1e-6;

class SumOfSquaresGpuTest : public gpu_test::GpuTest,
                            public testing::WithParamInterface<int64_t> {};

TEST_P(SumOfSquaresGpuTest, MatchesCpu) {
  const int64_t n = GetParam();
  // A view [n, 1] (n = 0 still needs a non-null pointer: one spare float).
  std::vector<float> x =
      Normal(std::max<int64_t>(n, 1), static_cast<uint64_t>(n) * 2 + 1, 0.3f, 2.0f);
  CpuBackend cpu;
  float ref = -1.0f;
  ASSERT_TRUE(cpu.SumOfSquares(Tensor::F32(x.data(), {n, 1}, Device::kCpu),
                               Tensor::F32(&ref, {1}, Device::kCpu))
                  .ok());

  const int64_t scratch_n = cuda::SumOfSquaresScratchFloats(n);
  GpuFloats x_g(x), x_mis(x, 1), out(Poison(1)), scratch(scratch_n);
  ASSERT_TRUE(x_g.ok() && x_mis.ok() && out.ok() && scratch.ok());
  absl::Status st = cuda::SumOfSquares(out.View({1}), x_g.View({n, 1}), scratch.View({scratch_n}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = out.Download();
  ExpectClose("sum of squares", got, {ref}, kSumRel, 0.0);
  if (n == 0) {
    EXPECT_EQ(got[0], 0.0f);
  }

  out.Upload(Poison(1));
  ASSERT_TRUE((st = cuda::SumOfSquares(out.View({1}), x_g.View({n, 1}), scratch.View({scratch_n})))
                  .ok())
      << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("second run", out.Download(), got);
  out.Upload(Poison(1));
  ASSERT_TRUE(
      (st = cuda::SumOfSquares(out.View({1}), x_mis.View({n, 1}), scratch.View({scratch_n}))).ok())
      << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("misaligned x", out.Download(), got);
}

INSTANTIATE_TEST_SUITE_P(Sizes, SumOfSquaresGpuTest,
                         testing::Values(int64_t{0}, int64_t{1}, int64_t{3}, int64_t{4},
                                         int64_t{7}, int64_t{1000}, int64_t{8191},
                                         int64_t{8192}, int64_t{8193}, int64_t{100003},
                                         int64_t{1} << 20));

// One parameter tensor on both sides.
struct Param {
  int64_t rows, cols;
  float weight_decay;
  int64_t offset;  // float offset of the GPU buffers (1: misaligned)
  std::vector<float> w, g, m, v;  // CPU copies (updated by the CPU op)
};

TEST(AdamWGpuTest, MultiTensorMatchesCpu) {
  std::string why;
  if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  // rows x cols, weight decay, offset.
  std::vector<Param> params = {
      {1, 1, 0.1f, 0, {}, {}, {}, {}},          {3, 1, 0.0f, 0, {}, {}, {}, {}},
      {0, 4, 0.1f, 0, {}, {}, {}, {}},          {1, 16384, 0.1f, 0, {}, {}, {}, {}},
      {7, 33, 0.0f, 1, {}, {}, {}, {}},         {16385, 1, 0.05f, 0, {}, {}, {}, {}},
      {65, 768, 0.1f, 0, {}, {}, {}, {}},       {99, 101, 0.0f, 1, {}, {}, {}, {}},
      {0, 1, 0.0f, 0, {}, {}, {}, {}},
  };
  std::vector<AdamWTensor> slots;
  std::vector<std::unique_ptr<GpuFloats>> buffers;
  for (size_t k = 0; k < params.size(); ++k) {
    Param& p = params[k];
    const int64_t n = p.rows * p.cols, alloc = std::max<int64_t>(n, 1);
    const uint64_t s = 1000 + 8 * k;
    p.w = Normal(alloc, s, 0.0f, 0.5f);
    p.g = Normal(alloc, s + 1, 0.0f, 0.1f);
    p.m = Normal(alloc, s + 2, 0.0f, 0.01f);
    p.v = Normal(alloc, s + 3, 0.0f, 0.01f);
    for (float& x : p.v) x *= x;  // second moments are non-negative
    AdamWTensor slot;
    for (const std::vector<float>* h : {&p.w, &p.g, &p.m, &p.v}) {
      buffers.push_back(std::make_unique<GpuFloats>(*h, p.offset));
      ASSERT_TRUE(buffers.back()->ok());
    }
    const size_t b = buffers.size() - 4;
    slot.param = buffers[b]->View({p.rows, p.cols});
    slot.grad = buffers[b + 1]->View({p.rows, p.cols});
    slot.m = buffers[b + 2]->View({p.rows, p.cols});
    slot.v = buffers[b + 3]->View({p.rows, p.cols});
    slot.weight_decay = p.weight_decay;
    slots.push_back(slot);
  }
  const int64_t desc_bytes = cuda::AdamWDescriptorBytes(static_cast<int>(slots.size()));
  GpuFloats descriptors((desc_bytes + 3) / 4);
  ASSERT_TRUE(descriptors.ok());

  CpuBackend cpu;
  AdamWParams hp;
  hp.lr = 0.01f;
  hp.grad_scale = 0.5f;
  for (int step = 1; step <= 2; ++step) {
    hp.step = step;
    for (Param& p : params) {
      auto host = [&](std::vector<float>& x) {
        return Tensor::F32(x.data(), {p.rows, p.cols}, Device::kCpu);
      };
      ASSERT_TRUE(
          cpu.AdamWUpdate({{host(p.w), host(p.g), host(p.m), host(p.v), p.weight_decay}}, hp)
              .ok());
    }
    const absl::Status st = cuda::AdamWUpdate(slots, hp, descriptors.View({descriptors.size()}));
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    for (size_t k = 0; k < params.size(); ++k) {
      const Param& p = params[k];
      const std::vector<float> w = buffers[4 * k]->Download(), m = buffers[4 * k + 2]->Download(),
                               v = buffers[4 * k + 3]->Download();
      const std::string what = absl::StrCat("step ", step, " tensor ", k);
      ExpectBitwise(what + " param", w, p.w);
      ExpectBitwise(what + " m", m, p.m);
      ExpectBitwise(what + " v", v, p.v);
      ExpectBitwise(absl::StrCat("step ", step, " tensor ", k, " grad (read only)"),
                    buffers[4 * k + 1]->Download(), p.g);
      // The next step starts both sides from the CPU's state, so each step
      // is compared on identical inputs.
      buffers[4 * k]->Upload(p.w);
      buffers[4 * k + 2]->Upload(p.m);
      buffers[4 * k + 3]->Upload(p.v);
    }
  }
}

// ---- bf16 copies (mixed precision) -------------------------------------------------

// n bf16 elements on the device, poisoned (all-ones bits: a NaN) first.
std::unique_ptr<gpu_test::GpuBuffer<bf16>> PoisonedBf16(int64_t n, int64_t offset = 0) {
  auto b = std::make_unique<gpu_test::GpuBuffer<bf16>>(std::vector<bf16>(n, 0xffff), offset);
  return b;
}

// Values that exercise every branch of the roundings: signed zeros,
// subnormals, exact bf16 values, ties, values next to the largest finite
// bf16, infinities and NaN, then normal noise.
std::vector<float> RoundingInputs(int64_t n) {
  const float special[] = {0.0f,
                           -0.0f,
                           1e-40f,
                           -1e-40f,
                           1.0f,
                           1.0f + 1.0f / 256,  // a tie between two bf16 values
                           1.0f + 3.0f / 512,
                           -2.5f,
                           3.3895314e38f,  // the largest finite bf16
                           3.4028235e38f,  // the largest float: rounds to inf
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> x = Normal(n, 4242, 0.0f, 3.0f);
  for (size_t i = 0; i < std::size(special) && i < x.size(); ++i) x[i] = special[i];
  return x;
}

// Bits equal, except that any NaN matches any NaN (both quiet).
void ExpectSameBf16(const std::string& what, const std::vector<bf16>& got,
                    const std::vector<bf16>& want) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool nan = std::isnan(Bf16ToFloat(got[i])) && std::isnan(Bf16ToFloat(want[i]));
    if (got[i] != want[i] && !nan && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " differ; first at "
                     << first << ": 0x" << std::hex << got[first] << " vs 0x" << want[first];
}

// RoundToBf16 on the device is the host's definition bit for bit: to nearest
// even (src/core/bf16.h FloatToBf16), and stochastically with the Philox
// words of kernels/philox.cuh, which must be src/core/philox.h's.
TEST(RoundToBf16GpuTest, MatchesTheHostBitForBit) {
  std::string why;
  if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  for (int64_t n : {int64_t{1}, int64_t{13}, int64_t{1000}, int64_t{100003}}) {
    const std::vector<float> x = RoundingInputs(n);
    GpuFloats src(x);
    for (const bool stochastic : {false, true}) {
      const StochasticRounding sr{20240607, 17, (int64_t{5} << 40) + 3};
      auto dst = PoisonedBf16(n);
      const absl::Status st = cuda::RoundToBf16(dst->View({n}), src.View({n}),
                                                stochastic ? &sr : nullptr);
      ASSERT_TRUE(st.ok()) << st;
      std::vector<bf16> want(x.size());
      for (int64_t i = 0; i < n; ++i) {
        want[i] = stochastic ? FloatToBf16Stochastic(x[i], RoundingWord(sr.seed, sr.step,
                                                                        sr.offset + i))
                             : FloatToBf16(x[i]);
      }
      ExpectSameBf16(absl::StrCat("n ", n, stochastic ? " stochastic" : " nearest"),
                     dst->Download(), want);
    }
  }
}

// Stochastic rounding is unbiased: over many random words the mean of the
// rounded values is the input, and each result is one of its two bf16
// neighbours. (Host only: the device's words are the host's, above.)
TEST(StochasticRoundingTest, IsUnbiasedBetweenTheTwoNeighbours) {
  for (const float x : {1.0f + 1.0f / 1024, -3.14159f, 1e-3f, 7.0e4f}) {
    const float down = Bf16ToFloat(static_cast<bf16>(std::bit_cast<uint32_t>(x) >> 16));
    const float up = Bf16ToFloat(static_cast<bf16>((std::bit_cast<uint32_t>(x) >> 16) + 1));
    const int n = 200000;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const float r = Bf16ToFloat(FloatToBf16Stochastic(x, RoundingWord(99, 1, i)));
      ASSERT_TRUE(r == down || r == up) << x << " rounded to " << r;
      sum += r;
    }
    // The mean of n Bernoulli picks between down and up: 5 standard errors.
    const double p = (double{x} - down) / (double{up} - down);
    const double sigma = std::fabs(double{up} - down) * std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(sum / n, x, 5 * sigma + 1e-12 * std::fabs(x)) << x;
  }
}

// AdamW writes the bf16 copy in its pass: every element of param16 is the
// updated fp32 parameter (the one the same kernel wrote) rounded with the
// word of its own round_offset + i, on the device and on the CPU alike.
TEST(AdamWGpuTest, WritesTheStochasticallyRoundedCopy) {
  std::string why;
  if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  struct Shape {
    int64_t n, offset, round_offset;
  };
  const std::vector<Shape> shapes = {
      {1, 0, 0}, {7, 1, 1000}, {16385, 0, int64_t{3} << 40}, {65 * 768, 0, (int64_t{9} << 40) + 5}};
  AdamWParams hp;
  hp.lr = 0.01f;
  hp.step = 3;
  hp.round_seed = 1234567;
  std::vector<AdamWTensor> slots, cpu_slots;
  std::vector<std::unique_ptr<GpuFloats>> buffers;
  std::vector<std::unique_ptr<gpu_test::GpuBuffer<bf16>>> copies;
  std::vector<std::vector<float>> host(4 * shapes.size());
  std::vector<std::vector<bf16>> host_copies(shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    const int64_t n = shapes[k].n;
    for (int j = 0; j < 4; ++j) {
      host[4 * k + j] = Normal(n, 5000 + 8 * k + j, 0.0f, j == 0 ? 0.5f : 0.05f);
      if (j == 3) {
        for (float& x : host[4 * k + j]) x *= x;
      }
      buffers.push_back(std::make_unique<GpuFloats>(host[4 * k + j], shapes[k].offset));
    }
    copies.push_back(PoisonedBf16(n, shapes[k].offset));
    host_copies[k].assign(n, 0xffff);
    const size_t b = 4 * k;
    slots.push_back({buffers[b]->View({n}), buffers[b + 1]->View({n}), buffers[b + 2]->View({n}),
                     buffers[b + 3]->View({n}), 0.1f, copies[k]->View({n}),
                     shapes[k].round_offset});
    auto h = [&](int j) { return Tensor::F32(host[b + j].data(), {n}, Device::kCpu); };
    cpu_slots.push_back({h(0), h(1), h(2), h(3), 0.1f,
                         Tensor::BF16(host_copies[k].data(), {n}, Device::kCpu),
                         shapes[k].round_offset});
  }
  GpuFloats descriptors((cuda::AdamWDescriptorBytes(static_cast<int>(slots.size())) + 3) / 4);
  const absl::Status st = cuda::AdamWUpdate(slots, hp, descriptors.View({descriptors.size()}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(CpuBackend().AdamWUpdate(cpu_slots, hp).ok());
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::vector<float> w = buffers[4 * k]->Download();
    const std::vector<float>& w_cpu = host[4 * k];
    std::vector<bf16> want(w.size()), want_cpu(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const uint32_t word = RoundingWord(hp.round_seed, 3, shapes[k].round_offset + i);
      want[i] = FloatToBf16Stochastic(w[i], word);
      want_cpu[i] = FloatToBf16Stochastic(w_cpu[i], word);
    }
    ExpectSameBf16(absl::StrCat("gpu tensor ", k), copies[k]->Download(), want);
    ExpectSameBf16(absl::StrCat("cpu tensor ", k), host_copies[k], want_cpu);
  }
}

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(OptimizerGpuArgs, RejectsBadArguments) {
  float f[64];
  auto gf = [&](std::initializer_list<int64_t> dims) {
    return Tensor(f, DType::kF32, dims, Device::kCuda);
  };
  absl::Status s = cuda::SumOfSquares(gf({1}), Tensor::F32(f, {8}, Device::kCpu), gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "x on the host";
  s = cuda::SumOfSquares(gf({2}), gf({8}), gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "out of two elements";
  s = cuda::SumOfSquares(gf({1}), gf({8}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "missing scratch";

  AdamWTensor slot{gf({2, 4}), gf({2, 4}), gf({2, 4}), gf({4, 2}), 0.0f};
  AdamWParams hp;
  s = cuda::AdamWUpdate({slot}, hp, gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "v of the wrong shape";
  EXPECT_NE(s.message().find("v[0]"), std::string::npos) << s;
  slot.v = gf({2, 4});
  s = cuda::AdamWUpdate({slot}, hp, gf({2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "descriptors too small";
  hp.step = 0;
  s = cuda::AdamWUpdate({slot}, hp, gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "step 0";
  hp.step = 1;
  slot.param16 = gf({2, 4});  // f32, not bf16
  s = cuda::AdamWUpdate({slot}, hp, gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "param16 not bf16";
  EXPECT_NE(s.message().find("param16[0]"), std::string::npos) << s;

  uint16_t b[64];
  const Tensor b16(b, DType::kBF16, {8}, Device::kCuda);
  s = cuda::RoundToBf16(gf({8}), gf({8}), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "dst not bf16";
  s = cuda::RoundToBf16(b16, gf({9}), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "element counts differ";
  s = cuda::RoundToBf16(Tensor(f, DType::kBF16, {8}, Device::kCuda), gf({8}), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "dst overlaps src";
}

}  // namespace
}  // namespace ladder
