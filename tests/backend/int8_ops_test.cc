// Tests of the int8-weight ops (MatmulInt8Forward, DequantizeRows) and of
// quantize.h, at every ISA level this CPU supports (cpu_isa.h).
//
// What each asserts:
//  - MatmulInt8Forward over up to kSmallBatch tokens equals, bit for bit,
//    its definition (int8_matmul.cc: activations quantized per block of 32,
//    exact integer block dots, one fma per block in order), written here as
//    plain loops over the row-major matrix, so the panel layout, the tiles
//    and every ISA level are held to one scalar reference.
//  - Over more tokens (prefill: weights widened a panel at a time for
//    sgemm) it is the float matmul over the dequantized weights, within
//    1e-5 of the sum of |products| (sgemm's float rounding).
//  - It is as close to the unquantized matmul (double, over the dequantized
//    weights w = q * scale and the f32 activations) as activation
//    quantization allows: each x moves by at most half its block's step
//    xs / 2, so per element
//      |got - want| <= sum_b xs[b] / 2 * sum_{c in b} |w[c]| * (1 + 1e-4)
//                      + 1e-5 * (sum_c |x[c] w[c]| + |bias|) + 1e-6
//    (the second line: float rounding relative to the magnitudes summed).
//  - determinism, thread- and batch-independence up to kSmallBatch tokens:
//    bitwise.
//  - DequantizeRows: bitwise q * scale (one float multiply per value).
//  - quantize round trip: |x - q * scale| <= scale * (0.5 + 1e-4): half a
//    step, plus the float rounding of x / scale for |x / scale| <= 127.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/matmul_kernels.h"
#include "src/backend/quantize.h"
#include "tests/backend/cpu_test_inputs.h"

namespace ladder {
namespace {

using Floats = std::vector<float>;

using testing_inputs::Levels;
using testing_inputs::Uniform;

// A random [OC, C] weight quantized in groups of G: row-major for the
// references, in panels for the ops.
struct Quantized {
  int64_t OC, C, G;
  std::vector<int8_t> q, q_panels;
  Floats scales, scale_panels;
  Tensor Q() { return Tensor::I8(q_panels.data(), {OC, C}, Device::kCpu); }
  Tensor S() { return Tensor::F32(scale_panels.data(), {OC, C / G}, Device::kCpu); }
  float Scale(int64_t o, int64_t c) const { return scales[o * (C / G) + c / G]; }
  float W(int64_t o, int64_t c) const { return q[o * C + c] * Scale(o, c); }
};

Quantized MakeQuantized(int64_t OC, int64_t C, int64_t G, uint32_t seed) {
  Quantized w{OC,
              C,
              G,
              std::vector<int8_t>(OC * C),
              std::vector<int8_t>(OC * C),
              Floats(OC * C / G),
              Floats(OC * C / G)};
  const Floats f = Uniform(OC * C, seed);
  QuantizeRows(f.data(), OC, C, G, w.q.data(), w.scales.data());
  PackInt8Panels(w.q.data(), w.scales.data(), OC, C, G, w.q_panels.data(), w.scale_panels.data());
  return w;
}

// out [N, OC] at the given level.
Floats Matmul(CpuBackend& be, CpuIsa isa, Floats& x, Quantized& w, Floats& bias, int64_t N) {
  ScopedCpuIsa scoped(isa);
  Floats out(N * w.OC, NAN);
  const Tensor b = bias.empty() ? Tensor() : Tensor::F32(bias.data(), {w.OC}, Device::kCpu);
  EXPECT_TRUE(be.MatmulInt8Forward(Tensor::F32(out.data(), {N, w.OC}, Device::kCpu),
                                   Tensor::F32(x.data(), {N, w.C}, Device::kCpu), w.Q(), w.S(), b)
                  .ok());
  return out;
}

// The activations of each token quantized in blocks of 32.
struct Activations {
  std::vector<int8_t> q;
  Floats scales;  // [N, C / 32]
};

Activations QuantizeActivations(const Floats& x, int64_t N, int64_t C) {
  Activations a{std::vector<int8_t>(N * C), Floats(N * C / 32)};
  for (int64_t i = 0; i < N * C / 32; ++i)
    a.scales[i] = QuantizeSymmetric(&x[i * 32], 32, &a.q[i * 32]);
  return a;
}

// The definition of MatmulInt8Forward, as plain loops.
Floats Definition(const Activations& a, const Quantized& w, const Floats& bias, int64_t N) {
  const int64_t C = w.C, blocks = C / 32;
  Floats out(N * w.OC);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < w.OC; ++o) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t dot = 0;
        for (int64_t c = b * 32; c < b * 32 + 32; ++c) dot += a.q[n * C + c] * w.q[o * C + c];
        acc = std::fma(static_cast<float>(dot), w.Scale(o, b * 32) * a.scales[n * blocks + b], acc);
      }
      out[n * w.OC + o] = acc + (bias.empty() ? 0.0f : bias[o]);
    }
  }
  return out;
}

TEST(Int8OpsTest, MatmulIsItsDefinitionAtEveryLevel) {
  CpuBackend be;
  uint32_t seed = 1;
  for (int64_t N : {1, 3, 8, 16}) {
    for (int64_t C : {32, 96, 768}) {
      for (int64_t OC : {16, 112, 2304}) {
        for (int64_t G : {int64_t{32}, C}) {
          Quantized w = MakeQuantized(OC, C, G, ++seed);
          Floats x = Uniform(N * C, ++seed);
          const Activations a = QuantizeActivations(x, N, C);
          for (bool with_bias : {false, true}) {
            Floats bias = with_bias ? Uniform(OC, ++seed) : Floats();
            const Floats want = Definition(a, w, bias, N);
            for (CpuIsa isa : Levels()) {
              SCOPED_TRACE(::testing::Message()
                           << CpuIsaName(isa) << " N=" << N << " C=" << C << " OC=" << OC
                           << " G=" << G << " bias=" << with_bias);
              const Floats got = Matmul(be, isa, x, w, bias, N);
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
            }
          }
        }
      }
    }
  }
}

TEST(Int8OpsTest, MatmulIsWithinActivationQuantizationOfTheFloatMatmul) {
  CpuBackend be;
  uint32_t seed = 100;
  for (int64_t N : {1, 5}) {
    for (int64_t C : {96, 768}) {
      const int64_t OC = 48;
      Quantized w = MakeQuantized(OC, C, 32, ++seed);
      // Activations with a few large outliers, as residual streams have.
      Floats x = Uniform(N * C, ++seed, -2.0f, 2.0f);
      for (int64_t i = 7; i < N * C; i += 101) x[i] *= 20.0f;
      Floats bias = Uniform(OC, ++seed);
      const Activations a = QuantizeActivations(x, N, C);
      for (CpuIsa isa : Levels()) {
        SCOPED_TRACE(::testing::Message() << CpuIsaName(isa) << " N=" << N << " C=" << C);
        const Floats got = Matmul(be, isa, x, w, bias, N);
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t o = 0; o < OC; ++o) {
            double want = bias[o], mag = std::fabs(bias[o]), quant = 0.0;
            for (int64_t c = 0; c < C; ++c) {
              const double p = static_cast<double>(x[n * C + c]) * w.W(o, c);
              want += p;
              mag += std::fabs(p);
              quant += a.scales[(n * C + c) / 32] / 2.0 * std::fabs(w.W(o, c));
            }
            const double tol = quant * (1 + 1e-4) + 1e-5 * mag + 1e-6;
            ASSERT_LE(std::fabs(got[n * OC + o] - want), tol) << n << "," << o;
          }
        }
      }
    }
  }
}

TEST(Int8OpsTest, PrefillIsTheFloatMatmulOfTheDequantizedWeights) {
  CpuBackend be;
  uint32_t seed = 200;
  for (int64_t N : {17, 64, 200}) {
    for (int64_t C : {96, 768}) {
      for (int64_t OC : {48, 2304}) {
        for (int64_t G : {int64_t{32}, C}) {
          Quantized w = MakeQuantized(OC, C, G, ++seed);
          Floats x = Uniform(N * C, ++seed, -2.0f, 2.0f), bias = Uniform(OC, ++seed);
          SCOPED_TRACE(::testing::Message()
                       << "N=" << N << " C=" << C << " OC=" << OC << " G=" << G);
          const Floats got = Matmul(be, ActiveCpuIsa(), x, w, bias, N);
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t o = 0; o < OC; ++o) {
              double want = bias[o], mag = std::fabs(bias[o]);
              for (int64_t c = 0; c < C; ++c) {
                const double p = static_cast<double>(x[n * C + c]) * w.W(o, c);
                want += p;
                mag += std::fabs(p);
              }
              ASSERT_LE(std::fabs(got[n * OC + o] - want), 1e-5 * mag + 1e-6) << n << "," << o;
            }
          }
        }
      }
    }
  }
}

// At a fixed level the result is a function of the inputs alone: two calls,
// one thread or all, and a token alone or inside a batch of up to
// kSmallBatch all give the same bits (each output element runs the same
// operations wherever it lands).
TEST(Int8OpsTest, DeterministicAndIndependentOfThreadsAndBatch) {
  CpuBackend be;
  const int64_t N = cpu::kSmallBatch, C = 768, OC = 304;
  Quantized w = MakeQuantized(OC, C, 32, 11);
  Floats x = Uniform(N * C, 12), bias = Uniform(OC, 13);
  const int threads = omp_get_max_threads();
  for (CpuIsa isa : Levels()) {
    SCOPED_TRACE(CpuIsaName(isa));
    const Floats a = Matmul(be, isa, x, w, bias, N);
    const Floats b = Matmul(be, isa, x, w, bias, N);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    omp_set_num_threads(1);
    const Floats one_thread = Matmul(be, isa, x, w, bias, N);
    omp_set_num_threads(threads);
    EXPECT_EQ(0, std::memcmp(a.data(), one_thread.data(), a.size() * sizeof(float)));
    for (int64_t n : {int64_t{0}, int64_t{9}, N - 1}) {
      Floats row(x.begin() + n * C, x.begin() + (n + 1) * C);
      const Floats alone = Matmul(be, isa, row, w, bias, 1);
      EXPECT_EQ(0, std::memcmp(a.data() + n * OC, alone.data(), OC * sizeof(float))) << n;
    }
  }
}

TEST(Int8OpsTest, DequantizeRowsIsQTimesScale) {
  CpuBackend be;
  const int64_t OC = 48, C = 96;
  for (int64_t G : {32, 96}) {
    Quantized w = MakeQuantized(OC, C, G, 21);
    std::vector<int32_t> rows = {0, 47, 7, 7, 23};
    const int64_t N = static_cast<int64_t>(rows.size());
    Floats out(N * C, NAN);
    ASSERT_TRUE(be.DequantizeRows(Tensor::F32(out.data(), {N, C}, Device::kCpu), w.Q(), w.S(),
                                  Tensor::I32(rows.data(), {N}, Device::kCpu))
                    .ok());
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], w.W(rows[n], c)) << n << "," << c;
    }
  }
}

TEST(Int8OpsTest, QuantizeRoundTrip) {
  const int64_t rows = 64, cols = 256, G = 32;
  Floats x = Uniform(rows * cols, 31, -3.0f, 3.0f);
  for (int64_t c = 0; c < G; ++c) x[5 * cols + c] = 0.0f;  // one all-zero group
  std::vector<int8_t> q(rows * cols);
  Floats scales(rows * cols / G);
  QuantizeRows(x.data(), rows, cols, G, q.data(), scales.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols / G; ++g) {
      const float s = scales[r * (cols / G) + g];
      int max_q = 0;
      for (int64_t c = g * G; c < (g + 1) * G; ++c) {
        const int8_t v = q[r * cols + c];
        ASSERT_GE(v, -127);
        max_q = std::max(max_q, std::abs(static_cast<int>(v)));
        ASSERT_LE(std::fabs(x[r * cols + c] - v * s), s * (0.5f + 1e-4f)) << r << "," << c;
      }
      // The largest magnitude maps to +-127; an all-zero group to scale 0.
      ASSERT_EQ(max_q, s > 0.0f ? 127 : 0) << r << "," << g;
    }
  }
  EXPECT_EQ(scales[5 * (cols / G)], 0.0f);
}

TEST(Int8OpsTest, BadShapesAreInvalidArgument) {
  CpuBackend be;
  const int64_t N = 2, C = 64, OC = 16;
  Quantized w = MakeQuantized(OC, C, 32, 41);
  Floats x = Uniform(N * C, 42), out(N * OC), bias(OC + 1), f32_q(OC * C);
  std::vector<int8_t> q8(8 * C);
  Floats scales8(8 * C / 32);
  Floats scales16(OC * C / 16);
  const auto matmul = [&](Tensor o, Tensor in, Tensor q, Tensor s, Tensor b) {
    return be.MatmulInt8Forward(o, in, q, s, b).code();
  };
  const Tensor O = Tensor::F32(out.data(), {N, OC}, Device::kCpu),
               X = Tensor::F32(x.data(), {N, C}, Device::kCpu);
  constexpr auto kBad = absl::StatusCode::kInvalidArgument;
  ASSERT_EQ(matmul(O, X, w.Q(), w.S(), Tensor()), absl::StatusCode::kOk);
  // 8 rows: not a whole panel.
  EXPECT_EQ(matmul(Tensor::F32(out.data(), {N, 8}, Device::kCpu), X,
                   Tensor::I8(q8.data(), {8, C}, Device::kCpu),
                   Tensor::F32(scales8.data(), {8, C / 32}, Device::kCpu), Tensor()),
            kBad);
  // Groups of 16: not a multiple of 32.
  EXPECT_EQ(matmul(O, X, w.Q(), Tensor::F32(scales16.data(), {OC, C / 16}, Device::kCpu), Tensor()),
            kBad);
  // inp with C / 2 columns.
  EXPECT_EQ(matmul(O, Tensor::F32(x.data(), {2 * N, C / 2}, Device::kCpu), w.Q(), w.S(), Tensor()),
            kBad);
  // q stored as f32; inp as i32; out of the wrong width; bias of OC + 1.
  EXPECT_EQ(matmul(O, X, Tensor::F32(f32_q.data(), {OC, C}, Device::kCpu), w.S(), Tensor()), kBad);
  EXPECT_EQ(matmul(O, Tensor(x.data(), DType::kI32, {N, C}, Device::kCpu), w.Q(), w.S(), Tensor()),
            kBad);
  EXPECT_EQ(matmul(Tensor::F32(out.data(), {N * OC}, Device::kCpu), X, w.Q(), w.S(), Tensor()),
            kBad);
  EXPECT_EQ(matmul(O, X, w.Q(), w.S(), Tensor::F32(bias.data(), {OC + 1}, Device::kCpu)), kBad);

  // DequantizeRows: rows out of range, out of the wrong width.
  Floats rows_out(2 * C);
  for (int32_t bad : {-1, static_cast<int32_t>(OC)}) {
    std::vector<int32_t> rows = {0, bad};
    EXPECT_EQ(be.DequantizeRows(Tensor::F32(rows_out.data(), {2, C}, Device::kCpu), w.Q(), w.S(),
                                Tensor::I32(rows.data(), {2}, Device::kCpu))
                  .code(),
              kBad)
        << bad;
  }
  std::vector<int32_t> rows = {0};
  EXPECT_EQ(be.DequantizeRows(Tensor::F32(rows_out.data(), {2, C / 2}, Device::kCpu), w.Q(), w.S(),
                              Tensor::I32(rows.data(), {1}, Device::kCpu))
                .code(),
            kBad);
}

}  // namespace
}  // namespace ladder
