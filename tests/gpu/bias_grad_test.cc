// The CUDA bias gradient (kernels/bias_grad.cu) against the CPU reference:
// CpuBackend::MatmulBackward's dbias (column sums of dout, accumulated onto a
// non-zero start), for N from 1 to several chunks of rows, OC = 1, odd OC
// (scalar loads), OC multiples of 4 (16-byte loads) with a partial last
// column block, GPT-2 widths, and a misaligned dout; plus bitwise
// determinism, and the same bits from an aligned and a misaligned dout (the
// order of the adds depends only on the shape). Every case runs with dout
// stored in f32 and in bf16 (dbias is f32 either way): for bf16, dout is
// rounded to bf16 first (Bf16Rounded) and the CPU reference sums those
// rounded values, so both sides add the same numbers; and the bf16 run must
// give bitwise the dbias of an f32 dout holding the same values (the kernel
// widens exactly and sums in the same order whatever the vector width).
//
// Tolerance: |gpu - ref| <= 1e-5 (sqrt(N) + |ref|). Both sides sum N terms
// of size ~1 in different orders (the CPU row by row, the GPU in chunks and
// subsets); the rounding of such sums grows like sqrt(N) (the CPU's
// sequential sum has an rms error ~ 6e-8 N / 1.4, inside 1e-5 sqrt(N) up to
// N ~ 50000) whatever the sum's value, which can be ~0. The same tolerance
// holds for a bf16 dout: dbias is fp32 and the inputs are the same rounded
// values on both sides, so no bf16 rounding enters the comparison.
#include "src/backend/cuda/bias_grad.h"

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::Bf16Rounded;
using gpu_test::ExpectBitwise;
using gpu_test::ExpectClose;
using gpu_test::GpuFloats;
using gpu_test::GpuStored;
using gpu_test::Normal;

constexpr double kTol = 1e-5;

struct Case {
  int64_t N, OC;
};

// How gtest prints a failing case.
void PrintTo(const Case& c, std::ostream* os) { *os << "N" << c.N << "_OC" << c.OC; }


class BiasGradGpuTest : public gpu_test::GpuTest,
                        public testing::WithParamInterface<std::tuple<Case, DType>> {};

TEST_P(BiasGradGpuTest, MatchesCpu) {
  const auto [N, OC] = std::get<0>(GetParam());
  const DType dt = std::get<1>(GetParam());
  const uint64_t s = static_cast<uint64_t>(N * 7907 + OC) * 4;
  // dout as the device stores it: rounded to bf16 when it stores bf16.
  std::vector<float> dout = Normal(N * OC, s);
  if (dt == DType::kBF16) dout = Bf16Rounded(dout);
  const std::vector<float> dbias0 = Normal(OC, s + 1);

  // CPU: MatmulBackward with C = 1 and no dinp; only dbias is compared.
  CpuBackend cpu;
  std::vector<float> dout_c = dout, inp(N, 0.0f), weight(OC, 0.0f), dweight(OC, 0.0f);
  std::vector<float> ref = dbias0;
  absl::Status st = cpu.MatmulBackward(Tensor(), Tensor::F32(dweight.data(), {OC, 1}, Device::kCpu),
                                       Tensor::F32(ref.data(), {OC}, Device::kCpu),
                                       Tensor::F32(dout_c.data(), {N, OC}, Device::kCpu),
                                       Tensor::F32(inp.data(), {N, 1}, Device::kCpu),
                                       Tensor::F32(weight.data(), {OC, 1}, Device::kCpu));
  ASSERT_TRUE(st.ok()) << st;

  const int64_t scratch_n = std::max<int64_t>(1, cuda::BiasGradScratchFloats(N, OC));
  GpuStored dout_g(dout, dt), dout_mis(dout, dt, 1);
  GpuFloats db_g(OC), scratch(scratch_n);
  ASSERT_TRUE(dout_g.ok() && dout_mis.ok() && db_g.ok() && scratch.ok());
  auto run = [&](const GpuStored& d) {
    db_g.Upload(dbias0);
    scratch.Upload(gpu_test::Poison(scratch_n));
    return cuda::BiasGrad(db_g.View({OC}), d.View({N, OC}), scratch.View({scratch_n}));
  };
  ASSERT_TRUE((st = run(dout_g)).ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> db = db_g.Download();
  ExpectClose("dbias", db, ref, kTol, kTol * std::sqrt(static_cast<double>(N)));

  ASSERT_TRUE((st = run(dout_g)).ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("dbias, second run", db_g.Download(), db);

  ASSERT_TRUE((st = run(dout_mis)).ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("dbias from a misaligned dout", db_g.Download(), db);

  if (dt == DType::kBF16) {  // the same values stored in f32: the same bits
    const GpuStored dout_f32(dout, DType::kF32);
    ASSERT_TRUE(dout_f32.ok());
    ASSERT_TRUE((st = run(dout_f32)).ok()) << st;
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    ExpectBitwise("dbias from the same values in an f32 dout", db_g.Download(), db);
  }
}

// OC % 8 == 0 (768, 3072, 64) takes the 16-byte path in both dtypes; OC = 100
// and 132 only in f32 (OC % 4 == 0), bf16 reads them one element at a time.
INSTANTIATE_TEST_SUITE_P(
    Shapes, BiasGradGpuTest,
    testing::Combine(testing::Values(Case{1, 1}, Case{1, 768}, Case{5, 1}, Case{3, 7}, Case{64, 33},
                                     Case{65, 100}, Case{200, 132}, Case{1000, 768}, Case{777, 99},
                                     Case{4100, 64}, Case{300, 3072}),
                     testing::Values(DType::kF32, DType::kBF16)),
    [](const testing::TestParamInfo<std::tuple<Case, DType>>& info) {
      const Case c = std::get<0>(info.param);
      return absl::StrCat("N", c.N, "_OC", c.OC, "_", DTypeName(std::get<1>(info.param)));
    });

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(BiasGradGpuArgs, RejectsBadArguments) {
  float f[64];
  auto gf = [&](std::initializer_list<int64_t> dims) {
    return Tensor(f, DType::kF32, dims, Device::kCuda);
  };
  absl::Status s = cuda::BiasGrad(gf({8}), Tensor::F32(f, {4, 8}, Device::kCpu), gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "dout on the host";
  s = cuda::BiasGrad(gf({7}), gf({4, 8}), gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "dbias of the wrong size";
  s = cuda::BiasGrad(gf({8}), gf({4, 8}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "missing scratch";
  EXPECT_NE(s.message().find("scratch"), std::string::npos) << s;
  // dbias is a parameter gradient: f32 whatever dout's dtype.
  const Tensor dout16(f, DType::kBF16, {4, 8}, Device::kCuda);
  s = cuda::BiasGrad(Tensor(f, DType::kBF16, {8}, Device::kCuda), dout16, gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 dbias";
  EXPECT_NE(s.message().find("dbias"), std::string::npos) << s;
  s = cuda::BiasGrad(gf({8}), Tensor(f, DType::kI32, {4, 8}, Device::kCuda), gf({64}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "i32 dout";
  EXPECT_NE(s.message().find("dout must be f32 or bf16"), std::string::npos) << s;
}

}  // namespace
}  // namespace ladder
