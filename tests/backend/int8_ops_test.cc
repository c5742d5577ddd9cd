// Tests of the int8-weight ops (MatmulInt8Forward, DequantizeRows) on every
// backend of backend_test_util.h (cpu, cuda_sim, and cuda where a GPU is
// usable), and of quantize.h. Weights and activations are uploaded to the
// backend's device, outputs start as NaN and are read back.
//
// What each asserts (on every backend unless marked CPU-only):
//  - MatmulInt8Forward over up to kSmallBatch tokens equals, bit for bit,
//    its definition (int8_matmul.cc: activations quantized per block of 32,
//    exact integer block dots, one fma per block in order), written here as
//    plain loops over the row-major matrix, so the panel layout, the tiles
//    and (CPU-only, at every ISA level this CPU supports, cpu_isa.h) every
//    ISA level are held to one scalar reference. The CUDA backend computes
//    the same definition for any number of tokens (int8_matmul.h), so there
//    it is also checked bitwise at N = 41 and 67. No tolerance is needed on
//    any backend: the block dots are exact integers and the fma order is
//    fixed.
//    With AVX-512 VNNI the CPU runs the definition for any number of
//    tokens too (matmul_kernels.h Int8KernelMaxTokens), checked the same way.
//  - CPU-only: over more tokens at the levels without it (prefill: weights
//    widened a panel at a time for sgemm) it is the float matmul over the
//    dequantized weights, within 1e-5 of the sum of |products| (sgemm's
//    float rounding).
//  - It is as close to the unquantized matmul (double, over the dequantized
//    weights w = q * scale and the f32 activations) as activation
//    quantization allows: each x moves by at most half its block's step
//    xs / 2, so per element
//      |got - want| <= sum_b xs[b] / 2 * sum_{c in b} |w[c]| * (1 + 1e-4)
//                      + 1e-5 * (sum_c |x[c] w[c]| + |bias|) + 1e-6
//    (the second line: float rounding relative to the magnitudes summed).
//    This holds for any number of tokens on every backend (on the CPU's
//    prefill path the float matmul is closer still).
//  - determinism and batch-independence up to kSmallBatch tokens: bitwise;
//    CPU-only, at every ISA level and for one thread or all.
//  - W8A16 (bf16 activations and output; cuda and cuda-sim, InvalidArgument
//    on the CPU): within one bf16 rounding of the exact matmul over the
//    dequantized weights (double), plus fp32 summation error:
//      |got - want| <= 2^-8 |want| + 2e-5 (sum_c |w[c] x[c]| + |bias|)
//    (2^-8: half a bf16 step of the result; 2e-5: the fp32 sums of up to
//    C / 16 scaled 16-product parts, C <= 768). Random shapes with N not a
//    multiple of any tile, G = 32 and G = C; and bitwise deterministic and
//    independent of the batch (a token alone and inside N = 70). With an
//    f32 output (logits) it is the same sum unrounded: bf16(f32 out) is
//    the bf16 output, bit for bit.
//  - DequantizeRows: bitwise q * scale (one float multiply per value).
//    CPU-only: InvalidArgument for a row outside [0, OC) (the rows live on
//    the device; the CUDA kernel writes a row of NaN instead).
//  - shape and dtype errors: InvalidArgument on every backend.
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
#include "src/core/bf16.h"
#include "tests/backend/backend_test_util.h"
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

// A Quantized weight's panels on a backend's device.
struct DeviceWeight {
  testing_backends::DeviceArray<int8_t> q;
  testing_backends::DeviceArray<float> scales;
  DeviceWeight(testing_backends::BackendHarness& h, const Quantized& w)
      : q(h.Up(w.q_panels, {w.OC, w.C})), scales(h.Up(w.scale_panels, {w.OC, w.C / w.G})) {}
};

// out [N, OC] on h's backend (at the CPU's active ISA level).
Floats Matmul(testing_backends::BackendHarness& h, const Floats& x, const DeviceWeight& dw,
              const Quantized& w, const Floats& bias, int64_t N) {
  auto out = h.Out({N, w.OC});
  auto in = h.Up(x, {N, w.C});
  auto b = h.Up(bias.empty() ? Floats(w.OC) : bias, {w.OC});
  EXPECT_TRUE(h.be()
                  .MatmulInt8Forward(out.t(), in.t(), dw.q.t(), dw.scales.t(),
                                     bias.empty() ? Tensor() : b.t())
                  .ok());
  return out.Get();
}

// The same at a given CPU ISA level.
Floats Matmul(testing_backends::BackendHarness& h, CpuIsa isa, const Floats& x,
              const DeviceWeight& dw, const Quantized& w, const Floats& bias, int64_t N) {
  ScopedCpuIsa scoped(isa);
  return Matmul(h, x, dw, w, bias, N);
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

class Int8OpsTest : public testing_backends::BackendTest {};
LADDER_INSTANTIATE_ON_ALL_BACKENDS(Int8OpsTest);
class CpuOnlyInt8OpsTest : public testing_backends::CpuBackendTest {};

// MatmulInt8Forward equals Definition bitwise for each shape of the lists,
// with and without bias; at each of `levels` in turn (CPU ISA levels), or
// once as the backend is if `levels` is empty.
void ExpectDefinition(testing_backends::BackendHarness& h, std::initializer_list<int64_t> Ns,
                      std::initializer_list<int64_t> Cs, std::initializer_list<int64_t> OCs,
                      const std::vector<CpuIsa>& levels) {
  uint32_t seed = 1;
  for (int64_t N : Ns) {
    for (int64_t C : Cs) {
      for (int64_t OC : OCs) {
        for (int64_t G : {int64_t{32}, C}) {
          const Quantized w = MakeQuantized(OC, C, G, ++seed);
          const DeviceWeight dw(h, w);
          const Floats x = Uniform(N * C, ++seed);
          const Activations a = QuantizeActivations(x, N, C);
          for (bool with_bias : {false, true}) {
            const Floats bias = with_bias ? Uniform(OC, ++seed) : Floats();
            const Floats want = Definition(a, w, bias, N);
            const auto check = [&](const char* level) {
              SCOPED_TRACE(::testing::Message() << level << " N=" << N << " C=" << C << " OC=" << OC
                                                << " G=" << G << " bias=" << with_bias);
              const Floats got = Matmul(h, x, dw, w, bias, N);
              ASSERT_TRUE(testing_backends::BitwiseEqual(got, want));
            };
            if (levels.empty()) check("");
            for (CpuIsa isa : levels) {
              ScopedCpuIsa scoped(isa);
              check(CpuIsaName(isa));
            }
          }
        }
      }
    }
  }
}

// Up to kSmallBatch tokens on every backend (odd N, C and OC not multiples
// of any tile); the CUDA backend keeps to the definition beyond that too.
TEST_P(Int8OpsTest, MatmulIsItsDefinition) {
  ExpectDefinition(*this, {1, 3, 13, cpu::kSmallBatch}, {32, 96, 224}, {16, 112, 304}, {});
  if (!is_cpu()) ExpectDefinition(*this, {41, 67}, {96}, {48}, {});
}

TEST_F(CpuOnlyInt8OpsTest, MatmulIsItsDefinitionAtEveryLevel) {
  ExpectDefinition(*this, {1, 3, 8, 16}, {32, 96, 768}, {16, 112, 2304}, Levels());
  // Prefill sizes at the levels whose kernel takes them.
  std::vector<CpuIsa> all_sizes;
  for (CpuIsa isa : Levels()) {
    if (cpu::Int8KernelMaxTokens(isa) >= 200) all_sizes.push_back(isa);
  }
  if (!all_sizes.empty()) ExpectDefinition(*this, {41, 67, 200}, {96, 768}, {48, 304}, all_sizes);
}

// The activation-quantization bound of the header comment, at each of
// `levels` (or once, if empty).
void ExpectWithinActivationQuantization(testing_backends::BackendHarness& h,
                                        std::initializer_list<int64_t> Ns,
                                        const std::vector<CpuIsa>& levels) {
  uint32_t seed = 100;
  for (int64_t N : Ns) {
    for (int64_t C : {96, 768}) {
      const int64_t OC = 48;
      const Quantized w = MakeQuantized(OC, C, 32, ++seed);
      const DeviceWeight dw(h, w);
      // Activations with a few large outliers, as residual streams have.
      Floats x = Uniform(N * C, ++seed, -2.0f, 2.0f);
      for (int64_t i = 7; i < N * C; i += 101) x[i] *= 20.0f;
      const Floats bias = Uniform(OC, ++seed);
      const Activations a = QuantizeActivations(x, N, C);
      const auto check = [&](const char* level) {
        SCOPED_TRACE(::testing::Message() << level << " N=" << N << " C=" << C);
        const Floats got = Matmul(h, x, dw, w, bias, N);
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
      };
      if (levels.empty()) check("");
      for (CpuIsa isa : levels) {
        ScopedCpuIsa scoped(isa);
        check(CpuIsaName(isa));
      }
    }
  }
}

// Small batches and prefill-sized ones.
TEST_P(Int8OpsTest, MatmulIsWithinActivationQuantizationOfTheFloatMatmul) {
  ExpectWithinActivationQuantization(*this, {1, 5, 17, 67}, {});
}

TEST_F(CpuOnlyInt8OpsTest, MatmulIsWithinActivationQuantizationAtEveryLevel) {
  ExpectWithinActivationQuantization(*this, {1, 5}, Levels());
}

// The CPU backend's prefill path at the levels without VNNI (more than
// kSmallBatch tokens: sgemm over weights widened a panel at a time).
TEST_F(CpuOnlyInt8OpsTest, PrefillIsTheFloatMatmulOfTheDequantizedWeights) {
  std::vector<CpuIsa> levels;
  for (CpuIsa isa : Levels()) {
    if (cpu::Int8KernelMaxTokens(isa) < 17) levels.push_back(isa);
  }
  if (levels.empty()) return;  // every level takes 17 tokens in its own kernel
  uint32_t seed = 200;
  for (int64_t N : {17, 64, 200}) {
    for (int64_t C : {96, 768}) {
      for (int64_t OC : {48, 2304}) {
        for (int64_t G : {int64_t{32}, C}) {
          const Quantized w = MakeQuantized(OC, C, G, ++seed);
          const DeviceWeight dw(*this, w);
          const Floats x = Uniform(N * C, ++seed, -2.0f, 2.0f), bias = Uniform(OC, ++seed);
          SCOPED_TRACE(::testing::Message()
                       << "N=" << N << " C=" << C << " OC=" << OC << " G=" << G);
          // The reference, once for every level: the product in double, and
          // the sum of the products' magnitudes the tolerance scales with.
          std::vector<double> want(N * OC), mag(N * OC);
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t o = 0; o < OC; ++o) {
              double sum = bias[o], m = std::fabs(bias[o]);
              for (int64_t c = 0; c < C; ++c) {
                const double p = static_cast<double>(x[n * C + c]) * w.W(o, c);
                sum += p;
                m += std::fabs(p);
              }
              want[n * OC + o] = sum;
              mag[n * OC + o] = m;
            }
          }
          for (CpuIsa isa : levels) {
            ScopedCpuIsa scoped(isa);
            SCOPED_TRACE(CpuIsaName(isa));
            const Floats got = Matmul(*this, x, dw, w, bias, N);
            for (int64_t i = 0; i < N * OC; ++i) {
              ASSERT_LE(std::fabs(got[i] - want[i]), 1e-5 * mag[i] + 1e-6)
                  << i / OC << "," << i % OC;
            }
          }
        }
      }
    }
  }
}

// The result is a function of the inputs alone: two calls, and a token
// alone or inside a batch of up to kSmallBatch, give the same bits (each
// output element runs the same operations wherever it lands).
TEST_P(Int8OpsTest, DeterministicAndIndependentOfBatch) {
  const int64_t N = cpu::kSmallBatch, C = 224, OC = 112;
  const Quantized w = MakeQuantized(OC, C, 32, 11);
  const DeviceWeight dw(*this, w);
  const Floats x = Uniform(N * C, 12), bias = Uniform(OC, 13);
  const Floats a = Matmul(*this, x, dw, w, bias, N), b = Matmul(*this, x, dw, w, bias, N);
  EXPECT_TRUE(testing_backends::BitwiseEqual(a, b));
  for (int64_t n : {int64_t{0}, int64_t{9}, N - 1}) {
    const Floats row(x.begin() + n * C, x.begin() + (n + 1) * C);
    const Floats alone = Matmul(*this, row, dw, w, bias, 1);
    EXPECT_TRUE(
        testing_backends::BitwiseEqual(Floats(a.begin() + n * OC, a.begin() + (n + 1) * OC), alone))
        << n;
  }
}

// And, at a fixed level, of the thread count and the batch, at every level.
TEST_F(CpuOnlyInt8OpsTest, DeterministicAndIndependentOfThreadsAndBatchAtEveryLevel) {
  const int64_t N = cpu::kSmallBatch, C = 768, OC = 304;
  const Quantized w = MakeQuantized(OC, C, 32, 11);
  const DeviceWeight dw(*this, w);
  const Floats x = Uniform(N * C, 12), bias = Uniform(OC, 13);
  const int threads = omp_get_max_threads();
  for (CpuIsa isa : Levels()) {
    SCOPED_TRACE(CpuIsaName(isa));
    const Floats a = Matmul(*this, isa, x, dw, w, bias, N);
    const Floats b = Matmul(*this, isa, x, dw, w, bias, N);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    omp_set_num_threads(1);
    const Floats one_thread = Matmul(*this, isa, x, dw, w, bias, N);
    omp_set_num_threads(threads);
    EXPECT_EQ(0, std::memcmp(a.data(), one_thread.data(), a.size() * sizeof(float)));
    for (int64_t n : {int64_t{0}, int64_t{9}, N - 1}) {
      const Floats row(x.begin() + n * C, x.begin() + (n + 1) * C);
      const Floats alone = Matmul(*this, isa, row, dw, w, bias, 1);
      EXPECT_EQ(0, std::memcmp(a.data() + n * OC, alone.data(), OC * sizeof(float))) << n;
    }
  }
}

// ---- W8A16 -------------------------------------------------------------------

using Bf16s = std::vector<uint16_t>;

Bf16s ToBf16(const Floats& x) {
  Bf16s r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = FloatToBf16(x[i]);
  return r;
}

Floats Widen(const Bf16s& x) {
  Floats r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = Bf16ToFloat(x[i]);
  return r;
}

// out [N, OC] of the W8A16 layer on h's backend, widened; the call's status
// in *status.
Floats MatmulW8A16(testing_backends::BackendHarness& h, const Bf16s& x, const DeviceWeight& dw,
                   const Quantized& w, const Floats& bias, int64_t N,
                   absl::Status* status = nullptr) {
  auto out = h.Out<uint16_t>({N, w.OC});
  auto in = h.Up(x, {N, w.C});
  auto b = h.Up(bias.empty() ? Floats(w.OC) : bias, {w.OC});
  const absl::Status s = h.be().MatmulInt8Forward(out.t(), in.t(), dw.q.t(), dw.scales.t(),
                                                  bias.empty() ? Tensor() : b.t());
  if (status != nullptr) *status = s;
  return Widen(out.Get());
}

TEST_P(Int8OpsTest, W8A16IsTheMatmulWithinBf16Rounding) {
  if (is_cpu()) {
    const Quantized w = MakeQuantized(16, 64, 32, 3);
    absl::Status s;
    MatmulW8A16(*this, ToBf16(Uniform(64, 4)), DeviceWeight(*this, w), w, {}, 1, &s);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    GTEST_SKIP() << "the CPU backend stores fp32 activations only";
  }
  uint32_t seed = 300;
  for (int64_t N : {1, 7, 33, 70}) {
    for (int64_t C : {32, 224, 768}) {
      for (int64_t OC : {16, 112}) {
        for (int64_t G : {int64_t{32}, C}) {
          const Quantized w = MakeQuantized(OC, C, G, ++seed);
          const DeviceWeight dw(*this, w);
          const Bf16s x16 = ToBf16(Uniform(N * C, ++seed, -2.0f, 2.0f));
          const Floats x = Widen(x16);
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "N=" << N << " C=" << C << " OC=" << OC
                                              << " G=" << G << " bias=" << with_bias);
            const Floats bias = with_bias ? Uniform(OC, ++seed) : Floats();
            absl::Status status;
            const Floats got = MatmulW8A16(*this, x16, dw, w, bias, N, &status);
            ASSERT_TRUE(status.ok()) << status;
            for (int64_t n = 0; n < N; ++n) {
              for (int64_t o = 0; o < OC; ++o) {
                double want = bias.empty() ? 0.0 : bias[o];
                double mag = std::fabs(want);
                for (int64_t c = 0; c < C; ++c) {
                  const double p =
                      static_cast<double>(w.q[o * C + c]) * w.Scale(o, c) * x[n * C + c];
                  want += p;
                  mag += std::fabs(p);
                }
                const double g = got[n * OC + o];
                ASSERT_LE(std::fabs(g - want), std::ldexp(std::fabs(want), -8) + 2e-5 * mag)
                    << "n=" << n << " o=" << o << " got " << g << " want " << want;
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(Int8OpsTest, W8A16IsDeterministicAndIndependentOfBatch) {
  if (is_cpu()) GTEST_SKIP() << "the CPU backend stores fp32 activations only";
  const int64_t N = 70, C = 224, OC = 112;
  const Quantized w = MakeQuantized(OC, C, 32, 51);
  const DeviceWeight dw(*this, w);
  const Bf16s x = ToBf16(Uniform(N * C, 52));
  const Floats bias = Uniform(OC, 53);
  const Floats a = MatmulW8A16(*this, x, dw, w, bias, N), b = MatmulW8A16(*this, x, dw, w, bias, N);
  EXPECT_TRUE(testing_backends::BitwiseEqual(a, b));
  for (int64_t n : {int64_t{0}, int64_t{33}, N - 1}) {
    const Bf16s row(x.begin() + n * C, x.begin() + (n + 1) * C);
    const Floats alone = MatmulW8A16(*this, row, dw, w, bias, 1);
    EXPECT_TRUE(
        testing_backends::BitwiseEqual(Floats(a.begin() + n * OC, a.begin() + (n + 1) * OC), alone))
        << n;
  }
  // An f32 output (the head's logits) is the same sum unrounded: rounding
  // it gives the bf16 output's bits.
  auto f32_out = Out({N, OC});
  auto b_dev = Up(bias, {OC});
  ASSERT_TRUE(
      be().MatmulInt8Forward(f32_out.t(), Up(x, {N, C}).t(), dw.q.t(), dw.scales.t(), b_dev.t())
          .ok());
  const Floats f32 = f32_out.Get();
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(Bf16ToFloat(FloatToBf16(f32[i])), a[i]) << i;
  }
  // Any other output dtype is refused.
  auto i32_out = Out<int32_t>({N, OC});
  EXPECT_EQ(
      be().MatmulInt8Forward(i32_out.t(), Up(x, {N, C}).t(), dw.q.t(), dw.scales.t(), Tensor())
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_P(Int8OpsTest, DequantizeRowsIsQTimesScale) {
  const int64_t OC = 48, C = 96;
  for (int64_t G : {32, 96}) {
    const Quantized w = MakeQuantized(OC, C, G, 21);
    const DeviceWeight dw(*this, w);
    const std::vector<int32_t> rows = {0, 47, 7, 7, 23};
    const int64_t N = static_cast<int64_t>(rows.size());
    auto out_d = Out({N, C});
    ASSERT_TRUE(be().DequantizeRows(out_d.t(), dw.q.t(), dw.scales.t(), Up(rows, {N}).t()).ok());
    const Floats out = out_d.Get();
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(out[n * C + c], w.W(rows[n], c)) << n << "," << c;
    }
  }
}

// quantize.h runs on the host: no backend.
TEST(QuantizeTest, RoundTrip) {
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

TEST_P(Int8OpsTest, BadShapesAreInvalidArgument) {
  Backend& be = this->be();
  const int64_t N = 2, C = 64, OC = 16;
  const Quantized w = MakeQuantized(OC, C, 32, 41);
  const DeviceWeight dw(*this, w);
  auto x = Up(Uniform(N * C, 42), {N, C});
  auto out = Out({N, OC}), bias = Out({OC + 1}), f32_q = Out({OC, C});
  auto q8 = Out<int8_t>({8, C});
  auto scales8 = Out({8, C / 32}), scales16 = Out({OC, C / 16});
  const auto matmul = [&](Tensor o, Tensor in, Tensor q, Tensor s, Tensor b) {
    return be.MatmulInt8Forward(o, in, q, s, b).code();
  };
  const Tensor O = out.t(), X = x.t(), Q = dw.q.t(), S = dw.scales.t();
  constexpr auto kBad = absl::StatusCode::kInvalidArgument;
  ASSERT_EQ(matmul(O, X, Q, S, Tensor()), absl::StatusCode::kOk);
  // 8 rows: not a whole panel.
  EXPECT_EQ(matmul(out.t({N, 8}), X, q8.t(), scales8.t(), Tensor()), kBad);
  // Groups of 16: not a multiple of 32.
  EXPECT_EQ(matmul(O, X, Q, scales16.t(), Tensor()), kBad);
  // inp with C / 2 columns.
  EXPECT_EQ(matmul(O, x.t({2 * N, C / 2}), Q, S, Tensor()), kBad);
  // q stored as f32; inp as i32; out of the wrong width; bias of OC + 1.
  EXPECT_EQ(matmul(O, X, f32_q.t(), S, Tensor()), kBad);
  Tensor x_i32 = X;
  x_i32.dtype = DType::kI32;
  EXPECT_EQ(matmul(O, x_i32, Q, S, Tensor()), kBad);
  EXPECT_EQ(matmul(out.t({N * OC}), X, Q, S, Tensor()), kBad);
  EXPECT_EQ(matmul(O, X, Q, S, bias.t()), kBad);

  // DequantizeRows: out of the wrong width.
  auto rows_out = Out({2 * C});
  EXPECT_EQ(
      be.DequantizeRows(rows_out.t({2, C / 2}), Q, S, Up(std::vector<int32_t>{0}, {1}).t()).code(),
      kBad);
}

// Rows live on the device: only the CPU backend refuses one outside [0, OC).
TEST_F(CpuOnlyInt8OpsTest, DequantizeRowsRejectsBadRows) {
  const int64_t C = 64, OC = 16;
  const Quantized w = MakeQuantized(OC, C, 32, 41);
  const DeviceWeight dw(*this, w);
  auto rows_out = Out({2, C});
  for (int32_t bad : {-1, static_cast<int32_t>(OC)}) {
    EXPECT_EQ(be().DequantizeRows(rows_out.t(), dw.q.t(), dw.scales.t(),
                                  Up(std::vector<int32_t>{0, bad}, {2}).t())
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace ladder
