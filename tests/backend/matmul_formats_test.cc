// Tests of MatmulForward's inference paths (matmul_kernels.h): few tokens
// through ladder's own kernel with fp32 or bf16 weights, many tokens with
// bf16 weights widened a tile at a time for sgemm; the bf16 conversions
// (src/core/bf16.h) and the bf16 embedding lookup. Every level this CPU
// supports (cpu_isa.h) runs; outputs are NaN-poisoned before each call.
//
// What each asserts:
//  - Few tokens (N <= kSmallBatch): the result is, bit for bit, the
//    definition in matmul_kernels.h (64 fma lanes over the channels in
//    order, the pairwise fold, the tail, the bias), written here again as
//    plain loops; so every ISA level, tile and thread count agrees, and a
//    token's row is the same alone or inside a batch.
//  - That definition is a correct matmul: within 1e-5 of the sum of
//    |products| (float rounding over C terms is well below) of a double
//    reference.
//  - Many tokens with bf16 weights: within 1e-5 of the sum of |products| of
//    the double matmul over the widened weights (the tiles are exact, the
//    rest is sgemm's float rounding).
//  - FloatToBf16 rounds to nearest, ties to even; NaN stays NaN; widening
//    is exact.
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/matmul_kernels.h"
#include "src/core/bf16.h"
#include "tests/backend/cpu_test_inputs.h"

namespace ladder {
namespace {

using Floats = std::vector<float>;

using testing_inputs::Levels;
using testing_inputs::Uniform;

// A random [OC, C] weight, as fp32 and rounded to bf16.
struct Weights {
  int64_t OC, C;
  Floats f32;
  std::vector<bf16> b16;
  float At(bool bf, int64_t o, int64_t c) const {
    return bf ? Bf16ToFloat(b16[o * C + c]) : f32[o * C + c];
  }
  Tensor T(bool bf) {
    return bf ? Tensor::BF16(b16.data(), {OC, C}, Device::kCpu)
              : Tensor::F32(f32.data(), {OC, C}, Device::kCpu);
  }
};

Weights MakeWeights(int64_t OC, int64_t C, uint32_t seed) {
  Weights w{OC, C, Uniform(OC * C, seed), std::vector<bf16>(OC * C)};
  for (int64_t i = 0; i < OC * C; ++i) w.b16[i] = FloatToBf16(w.f32[i]);
  return w;
}

Floats Forward(CpuBackend& be, CpuIsa isa, Floats& x, Weights& w, bool bf, Floats& bias,
               int64_t N) {
  ScopedCpuIsa scoped(isa);
  Floats out(N * w.OC, NAN);
  const Tensor b = bias.empty() ? Tensor() : Tensor::F32(bias.data(), {w.OC}, Device::kCpu);
  EXPECT_TRUE(be.MatmulForward(Tensor::F32(out.data(), {N, w.OC}, Device::kCpu),
                               Tensor::F32(x.data(), {N, w.C}, Device::kCpu), w.T(bf), b)
                  .ok());
  return out;
}

// matmul_kernels.h's definition of a few-token output, as plain loops.
float Definition(const Floats& x, const Weights& w, bool bf, const Floats& bias, int64_t n,
                 int64_t o) {
  const int64_t C = w.C, full = C / 64 * 64;
  float lanes[64] = {};
  for (int64_t c = 0; c < full; ++c) {
    lanes[c % 64] = std::fma(w.At(bf, o, c), x[n * C + c], lanes[c % 64]);
  }
  for (int width = 32; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] = lanes[l] + lanes[l + width];
  }
  float s = lanes[0];
  for (int64_t c = full; c < C; ++c) s = std::fma(w.At(bf, o, c), x[n * C + c], s);
  return s + (bias.empty() ? 0.0f : bias[o]);
}

// |got - sum_c x w - bias| <= 1e-5 * (sum_c |x w| + |bias|) + 1e-6, in double.
::testing::AssertionResult NearFloatMatmul(const Floats& got, const Floats& x, const Weights& w,
                                           bool bf, const Floats& bias, int64_t N) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < w.OC; ++o) {
      double want = bias.empty() ? 0.0 : bias[o], mag = std::fabs(want);
      for (int64_t c = 0; c < w.C; ++c) {
        const double p = static_cast<double>(x[n * w.C + c]) * w.At(bf, o, c);
        want += p;
        mag += std::fabs(p);
      }
      const double err = std::fabs(got[n * w.OC + o] - want);
      if (!(err <= 1e-5 * mag + 1e-6)) {
        return ::testing::AssertionFailure()
               << "(" << n << "," << o << "): got " << got[n * w.OC + o] << ", want " << want;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(MatmulFormatsTest, FewTokensAreTheDefinitionAtEveryLevel) {
  CpuBackend be;
  uint32_t seed = 1;
  for (bool bf : {false, true}) {
    for (int64_t N : {1, 2, 3, 7, 16}) {
      for (int64_t C : {5, 64, 67, 130, 768}) {
        for (int64_t OC : {1, 9, 48}) {
          Weights w = MakeWeights(OC, C, ++seed);
          Floats x = Uniform(N * C, ++seed);
          for (bool with_bias : {false, true}) {
            Floats bias = with_bias ? Uniform(OC, ++seed) : Floats();
            Floats want(N * OC);
            for (int64_t n = 0; n < N; ++n) {
              for (int64_t o = 0; o < OC; ++o) want[n * OC + o] = Definition(x, w, bf, bias, n, o);
            }
            ASSERT_TRUE(NearFloatMatmul(want, x, w, bf, bias, N));
            for (CpuIsa isa : Levels()) {
              SCOPED_TRACE(::testing::Message()
                           << CpuIsaName(isa) << (bf ? " bf16" : " fp32") << " N=" << N
                           << " C=" << C << " OC=" << OC << " bias=" << with_bias);
              const Floats got = Forward(be, isa, x, w, bf, bias, N);
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
            }
          }
        }
      }
    }
  }
}

// A token's row is the same bits alone, in any batch up to kSmallBatch, and
// on one thread or all.
TEST(MatmulFormatsTest, FewTokensAreIndependentOfBatchAndThreads) {
  CpuBackend be;
  const int64_t N = cpu::kSmallBatch, C = 768, OC = 2304;
  Weights w = MakeWeights(OC, C, 7);
  Floats x = Uniform(N * C, 8), bias = Uniform(OC, 9);
  const int threads = omp_get_max_threads();
  for (bool bf : {false, true}) {
    for (CpuIsa isa : Levels()) {
      SCOPED_TRACE(::testing::Message() << CpuIsaName(isa) << (bf ? " bf16" : " fp32"));
      const Floats all = Forward(be, isa, x, w, bf, bias, N);
      omp_set_num_threads(1);
      const Floats one_thread = Forward(be, isa, x, w, bf, bias, N);
      omp_set_num_threads(threads);
      EXPECT_EQ(0, std::memcmp(all.data(), one_thread.data(), all.size() * sizeof(float)));
      for (int64_t n : {int64_t{0}, int64_t{5}, N - 1}) {
        Floats row(x.begin() + n * C, x.begin() + (n + 1) * C);
        const Floats alone = Forward(be, isa, row, w, bf, bias, 1);
        EXPECT_EQ(0, std::memcmp(all.data() + n * OC, alone.data(), OC * sizeof(float))) << n;
      }
    }
  }
}

// Beyond kSmallBatch, bf16 weights go through fp32 tiles and sgemm; fp32
// weights through sgemm alone. Both are the float matmul.
TEST(MatmulFormatsTest, ManyTokensAreTheFloatMatmul) {
  CpuBackend be;
  uint32_t seed = 50;
  for (bool bf : {false, true}) {
    for (int64_t N : {17, 64, 131}) {
      for (auto [OC, C] : {std::pair<int64_t, int64_t>{48, 67}, {700, 768}, {2304, 768}}) {
        Weights w = MakeWeights(OC, C, ++seed);
        Floats x = Uniform(N * C, ++seed), bias = Uniform(OC, ++seed);
        SCOPED_TRACE(::testing::Message()
                     << (bf ? "bf16" : "fp32") << " N=" << N << " C=" << C << " OC=" << OC);
        const Floats got = Forward(be, ActiveCpuIsa(), x, w, bf, bias, N);
        ASSERT_TRUE(NearFloatMatmul(got, x, w, bf, bias, N));
      }
    }
  }
}

TEST(MatmulFormatsTest, Bf16BackwardIsRefused) {
  CpuBackend be;
  const int64_t N = 4, C = 32, OC = 16;
  Weights w = MakeWeights(OC, C, 3);
  Floats x = Uniform(N * C, 4), dout = Uniform(N * OC, 5), dx(N * C), dw(OC * C);
  const absl::Status s = be.MatmulBackward(Tensor::F32(dx.data(), {N, C}, Device::kCpu),
                                           Tensor::F32(dw.data(), {OC, C}, Device::kCpu), Tensor(),
                                           Tensor::F32(dout.data(), {N, OC}, Device::kCpu),
                                           Tensor::F32(x.data(), {N, C}, Device::kCpu), w.T(true));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(MatmulFormatsTest, EmbeddingReadsABf16Table) {
  CpuBackend be;
  const int64_t V = 40, C = 24, T = 5;
  Weights wte = MakeWeights(V, C, 61);
  Floats wpe = Uniform(T * C, 62), out(T * C, NAN);
  std::vector<int32_t> tokens = {3, 39, 0, 3, 17}, positions = {0, 1, 2, 3, 4};
  ASSERT_TRUE(be.EmbeddingForward(Tensor::F32(out.data(), {1, T, C}, Device::kCpu),
                                  Tensor::I32(tokens.data(), {1, T}, Device::kCpu),
                                  Tensor::I32(positions.data(), {1, T}, Device::kCpu), wte.T(true),
                                  Tensor::F32(wpe.data(), {T, C}, Device::kCpu), 0)
                  .ok());
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      ASSERT_EQ(out[t * C + c], wte.At(true, tokens[t], c) + wpe[t * C + c]) << t << "," << c;
    }
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even (1).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), FloatToBf16(1.0f));
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // Just above a half rounds up, just below rounds down.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f - 0x1p-20f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);  // exact values stay
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::infinity()))));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::max()))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the dropped bits stays a NaN.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::bit_cast<float>(0x7f800001u)))));
  // Relative error at most half a step, 2^-8, on normal values.
  const Floats x = Uniform(10000, 71);
  for (float v : x) {
    ASSERT_LE(std::fabs(Bf16ToFloat(FloatToBf16(v)) - v), std::fabs(v) * 0x1p-8f) << v;
  }
}

}  // namespace
}  // namespace ladder
