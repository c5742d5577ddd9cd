// The tensor-core layer (kernels/tensor_core.cuh) against plain matrix
// products on the host, through the test kernels of
// kernels/tensor_core_selftest.cu: one mma.sync m16n8k16 (bf16 -> fp32) with
// its fragments loaded directly from global memory by the documented layout
// and through every ldmatrix variant from shared memory filled by cp.async;
// a tiled GEMM with cp.async double buffering; and the bf16 pair packing.
// Built twice (tests/gpu/meson.build): on a GPU this checks the inline PTX,
// on the simulator its emulation of the PTX layouts.
//
// Tolerance: products of bf16 values are exact in fp32 and only the order
// and internal rounding of the sum differ between the host (double), the
// simulator (fp32 in k order) and a GPU (unspecified), so
//   |got - ref| <= 4 (K + 1) 2^-24 (|c| + sum_k |a_k b_k|),
// a few times the worst-case error of a K-term fp32 sum. With small integer
// inputs every partial sum is exact and the results must match bit for bit,
// which pins the layouts down without any tolerance.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/tensor_core_selftest.h"
#include "src/core/bf16.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::ExpectBitwise;
using gpu_test::ExpectWithin;
using gpu_test::GpuBuffer;
using gpu_test::GpuFloats;
using gpu_test::Normal;
using gpu_test::Poison;
using gpu_test::UniformInts;
using kernels::TensorCoreLoad;

// Host matrices: bf16 bits and their float values.
std::vector<bf16> ToBf16(const std::vector<float>& x) {
  std::vector<bf16> b(x.size());
  for (size_t i = 0; i < x.size(); ++i) b[i] = FloatToBf16(x[i]);
  return b;
}

// d [M, N] = a [M, K] * bt^T + c (c may be empty), in double, and the
// tolerance of each element (see the top of the file).
void Reference(const std::vector<bf16>& a, const std::vector<bf16>& bt, const std::vector<float>& c,
               int M, int N, int K, std::vector<float>* d, std::vector<double>* bound) {
  d->assign(static_cast<size_t>(M) * N, 0.0f);
  bound->assign(d->size(), 0.0);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      const size_t o = static_cast<size_t>(m) * N + n;
      double sum = c.empty() ? 0.0 : c[o], mag = std::fabs(sum);
      for (int k = 0; k < K; ++k) {
        const double p = static_cast<double>(Bf16ToFloat(a[static_cast<size_t>(m) * K + k])) *
                         Bf16ToFloat(bt[static_cast<size_t>(n) * K + k]);
        sum += p;
        mag += std::fabs(p);
      }
      (*d)[o] = static_cast<float>(sum);
      (*bound)[o] = 4.0 * (K + 1) * std::ldexp(mag, -24) + 1e-30;
    }
  }
}

std::vector<float> SmallInts(int64_t n, uint64_t stream) {
  std::vector<float> v;
  for (int32_t x : UniformInts(n, stream, -8, 9)) v.push_back(static_cast<float>(x));
  return v;
}

// ---- one mma, every way of loading its fragments --------------------------------

struct FragmentCase {
  TensorCoreLoad load;
  bool integers;  // small integers: exact, compared bit for bit
};

void PrintTo(const FragmentCase& c, std::ostream* os) {
  *os << "load" << static_cast<int>(c.load) << (c.integers ? "_integers" : "_normal");
}

class TensorCoreFragmentTest : public gpu_test::GpuTest,
                               public testing::WithParamInterface<FragmentCase> {};

TEST_P(TensorCoreFragmentTest, MatchesHostProduct) {
  const auto [load, integers] = GetParam();
  const uint64_t s = 100 + 10 * static_cast<uint64_t>(load) + (integers ? 5 : 0);
  // A [16x16], B [16x8] (k x n), C [16x8].
  const std::vector<bf16> a = ToBf16(integers ? SmallInts(256, s) : Normal(256, s));
  const std::vector<bf16> b = ToBf16(integers ? SmallInts(128, s + 1) : Normal(128, s + 1));
  const std::vector<float> c = integers ? SmallInts(128, s + 2) : Normal(128, s + 2);
  // The operand buffer: [A | A^T | B^T | B], all row-major.
  std::vector<bf16> ops(kernels::kTensorCoreOperandElems);
  std::vector<bf16> bt(128);
  for (int m = 0; m < 16; ++m) {
    for (int k = 0; k < 16; ++k) {
      ops[m * 16 + k] = a[m * 16 + k];
      ops[256 + k * 16 + m] = a[m * 16 + k];
    }
  }
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 8; ++n) {
      bt[n * 16 + k] = b[k * 8 + n];
      ops[512 + n * 16 + k] = b[k * 8 + n];
      ops[640 + k * 8 + n] = b[k * 8 + n];
    }
  }
  std::vector<float> want;
  std::vector<double> bound;
  Reference(a, bt, c, 16, 8, 16, &want, &bound);

  GpuBuffer<bf16> d_ops(ops);
  GpuFloats d_c(c), d_d(Poison(128));
  ASSERT_TRUE(d_ops.ok() && d_c.ok() && d_d.ok());
  ASSERT_CUDA_OK(
      kernels::LaunchTensorCoreFragmentTest(d_d.data(), d_ops.data(), d_c.data(), load, nullptr));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = d_d.Download();
  if (integers) {
    ExpectBitwise("D (integers)", got, want);
  } else {
    ExpectWithin("D", got, want, bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Loads, TensorCoreFragmentTest,
                         testing::Values(FragmentCase{TensorCoreLoad::kDirect, true},
                                         FragmentCase{TensorCoreLoad::kDirect, false},
                                         FragmentCase{TensorCoreLoad::kX4X2, true},
                                         FragmentCase{TensorCoreLoad::kX4X2, false},
                                         FragmentCase{TensorCoreLoad::kX4TransX2, true},
                                         FragmentCase{TensorCoreLoad::kX4TransX2, false},
                                         FragmentCase{TensorCoreLoad::kX1X2Trans, true},
                                         FragmentCase{TensorCoreLoad::kX1X2Trans, false},
                                         FragmentCase{TensorCoreLoad::kX1TransX1, true},
                                         FragmentCase{TensorCoreLoad::kX1TransX1, false}));

// ---- a tiled GEMM with cp.async double buffering ------------------------------------

struct GemmCase {
  int M, N, K;
};

void PrintTo(const GemmCase& c, std::ostream* os) { *os << c.M << "x" << c.N << "x" << c.K; }

class TensorCoreGemmTest : public gpu_test::GpuTest,
                           public testing::WithParamInterface<GemmCase> {};

TEST_P(TensorCoreGemmTest, MatchesHostProduct) {
  const auto [M, N, K] = GetParam();
  const uint64_t s = static_cast<uint64_t>(M * 7 + N * 3 + K) * 4;
  const std::vector<bf16> a = ToBf16(Normal(int64_t{M} * K, s));
  const std::vector<bf16> bt = ToBf16(Normal(int64_t{N} * K, s + 1));
  std::vector<float> want;
  std::vector<double> bound;
  Reference(a, bt, {}, M, N, K, &want, &bound);

  GpuBuffer<bf16> d_a(a), d_bt(bt);
  GpuFloats d_d(Poison(int64_t{M} * N));
  ASSERT_TRUE(d_a.ok() && d_bt.ok() && d_d.ok());
  ASSERT_CUDA_OK(
      kernels::LaunchTensorCoreGemmTest(d_d.data(), d_a.data(), d_bt.data(), M, N, K, nullptr));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectWithin("D", d_d.Download(), want, bound);
}

INSTANTIATE_TEST_SUITE_P(Shapes, TensorCoreGemmTest,
                         testing::Values(GemmCase{64, 64, 64}, GemmCase{128, 64, 128},
                                         GemmCase{64, 128, 32}, GemmCase{64, 64, 160}));

// ---- bf16 pairs ------------------------------------------------------------------

// PackBf16x2 rounds as FloatToBf16 does (to nearest, ties to even) and puts
// the first float in the low half: normals, exact ties both ways, values
// that round up into the next binade or to infinity, subnormals, zeros.
class TensorCorePackTest : public gpu_test::GpuTest {};

TEST_F(TensorCorePackTest, PackBf16x2RoundsLikeTheHost) {
  std::vector<float> in = Normal(1000, 7);
  for (uint32_t bits :
       {0x3f808000u, 0x3f818000u, 0xbf808000u, 0xbf818000u, 0x3f80ffffu, 0x3fffffffu, 0x7f7fffffu,
        0xff7fffffu, 0x00000001u, 0x80008000u, 0x00018000u, 0x00000000u, 0x80000000u, 0x7f800000u,
        0xff800000u, 0x3f7f8000u}) {
    in.push_back(std::bit_cast<float>(bits));
  }
  if (in.size() % 2 != 0) in.push_back(1.0f);
  const int n = static_cast<int>(in.size() / 2);
  std::vector<uint32_t> want(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    want[i] = uint32_t{FloatToBf16(in[2 * i])} | uint32_t{FloatToBf16(in[2 * i + 1])} << 16;
  }
  GpuFloats d_in(in);
  GpuBuffer<uint32_t> d_out(n);
  ASSERT_TRUE(d_in.ok() && d_out.ok());
  ASSERT_CUDA_OK(kernels::LaunchTensorCorePackTest(d_out.data(), d_in.data(), n, nullptr));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint32_t> got = d_out.Download();
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (got[i] != want[i] && bad++ < 5) {
      ADD_FAILURE() << absl::StrCat("pair ", i, " (", in[2 * i], ", ", in[2 * i + 1], "): got 0x",
                                    absl::Hex(got[i], absl::kZeroPad8), " want 0x",
                                    absl::Hex(want[i], absl::kZeroPad8));
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace ladder
