// The CUDA residual+LayerNorm kernels (kernels/residual_layernorm.cu) against
// the CPU reference (CpuBackend) on random inputs: forward outputs
// (residual_out, y, mean, rstd) and backward (d_residual accumulated onto a
// non-zero start, dgamma/dbeta accumulated), for rows 1..4096, channels from
// 99 (scalar path) to 12345 (shared-memory opt-in path), with and without the
// residual add; plus bitwise determinism and the argument checks. Every GPU
// output is poisoned with NaN first.
//
// Storage: every case runs with f32 activations, and a subset with bf16
// activations and gamma/beta (backend.h "Precision"). For bf16 the inputs are
// rounded to bf16 first (Bf16Rounded) and the fp32 CPU reference computes on
// those same values. The GPU's LayerNorm normalizes residual_out as stored
// (rounded to bf16), so for bf16 the reference of y, mean and rstd is the
// CPU's LayerNorm (no add) of the residual_out the GPU stored, downloaded.
//
// Tolerances, per element, with ref the CPU value, N the rows and
// r16 = kBf16Rounding = 2^-8 for bf16 outputs, 0 for f32:
//   |gpu - ref| <= r16 |ref| + 1e-5 (1 + |ref|)   y, d_residual (activations:
//     the fp32 tolerance plus one final rounding to bf16)
//   |gpu - ref| <= 1e-5 (1 + |ref|)               mean, rstd (f32 in both
//     storages; the inputs are identical)
//   |gpu - ref| <= 1e-4 (sqrt(N) + |ref|)          dgamma, dbeta (f32 in both
//     storages): sums over N rows of terms of size ~1, summed in different
//     orders on the two sides; their rounding grows like sqrt(N) whatever the
//     sum's value (which can be ~0).
// residual_out is an fp32 add in both, rounded once for bf16: it must equal
// the CPU's sum (f32) or that sum rounded to bf16 (bf16) bit for bit.
//
// Without a GPU every test that needs one skips with the reason; the argument
// checks (including mixed-dtype calls) still run. Inputs come from Philox
// (seed 20240607, or LADDER_GPU_TEST_SEED), so a failure reproduces.
#include "src/backend/cuda/residual_layernorm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::Bf16Rounded;
using gpu_test::GpuFloats;
using gpu_test::GpuStored;
using gpu_test::kBf16Rounding;
using gpu_test::Normal;
using gpu_test::Poison;

// |got - want| <= rel * |want| + tol * (scale + |want|).
void ExpectClose(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                 float tol, double scale = 1.0, double rel = 0.0) {
  gpu_test::ExpectClose(what, got, want, tol + rel, tol * scale);
}

constexpr float kActTol = 1e-5f;
constexpr float kParamGradTol = 1e-4f;

struct Case {
  int64_t N, C;
  bool branch;
  DType dtype = DType::kF32;
};

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  return absl::StrCat("N", info.param.N, "_C", info.param.C, info.param.branch ? "_add" : "_noadd",
                      info.param.dtype == DType::kBF16 ? "_bf16" : "");
}

// How gtest prints a failing case: its name.
void PrintTo(const Case& c, std::ostream* os) {
  *os << CaseName(testing::TestParamInfo<Case>(c, 0));
}

class ResidualLayerNormGpuTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

Tensor Cpu(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor::F32(v.data(), dims, Device::kCpu);
}

// One full comparison; `offset` shifts every GPU activation buffer by that
// many elements (offset 1 defeats 16-byte alignment and forces the scalar
// kernels).
void CompareWithCpu(const Case& c, int64_t offset) {
  const int64_t N = c.N, C = c.C, NC = N * C;
  const uint64_t s = static_cast<uint64_t>(N * 100003 + C * 7 + (c.branch ? 1 : 0)) * 16;
  const bool bf16 = c.dtype == DType::kBF16;
  const DType dt = c.dtype;
  // What the GPU stores of a host vector: itself, or rounded to bf16.
  auto stored = [&](std::vector<float> v) { return bf16 ? Bf16Rounded(std::move(v)) : v; };
  const double r16 = bf16 ? kBf16Rounding : 0.0;  // one final rounding of a bf16 output

  // Inputs: a residual stream with an offset and scale (to exercise the mean
  // and variance), a branch, weights near 1 and 0, an upstream gradient. The
  // activations and weights as stored; dgamma/dbeta start values are f32.
  const std::vector<float> residual_in = stored(Normal(NC, s + 0, 0.5f, 2.0f));
  const std::vector<float> branch = stored(Normal(NC, s + 1, 0.0f, 1.0f));
  const std::vector<float> gamma = stored(Normal(C, s + 2, 1.0f, 0.1f));
  const std::vector<float> beta = stored(Normal(C, s + 3, 0.0f, 0.1f));
  const std::vector<float> dy = stored(Normal(NC, s + 4, 0.0f, 1.0f));
  const std::vector<float> d_residual0 = stored(Normal(NC, s + 5, 0.0f, 1.0f));
  const std::vector<float> dgamma0 = Normal(C, s + 6, 0.0f, 1.0f);
  const std::vector<float> dbeta0 = Normal(C, s + 7, 0.0f, 1.0f);

  // ---- CPU reference forward (fp32) ----
  CpuBackend cpu;
  std::vector<float> in_c = residual_in, br_c = branch, g_c = gamma, b_c = beta;
  std::vector<float> res_c(c.branch ? NC : 0), y_c(NC), mean_c(N), rstd_c(N);
  ASSERT_TRUE(cpu.ResidualLayerNormForward(
                     c.branch ? Cpu(res_c, {N, C}) : Tensor(), Cpu(y_c, {N, C}), Cpu(mean_c, {N}),
                     Cpu(rstd_c, {N}), Cpu(in_c, {N, C}), c.branch ? Cpu(br_c, {N, C}) : Tensor(),
                     Cpu(g_c, {C}), Cpu(b_c, {C}))
                  .ok());

  // ---- GPU forward ----
  GpuStored in_g(residual_in, dt, offset), br_g(branch, dt, offset), res_g(Poison(NC), dt, offset),
      y_g(Poison(NC), dt, offset), gamma_g(gamma, dt, offset), beta_g(beta, dt, offset);
  GpuFloats mean_g(Poison(N)), rstd_g(Poison(N));
  for (const GpuStored* b : {&in_g, &br_g, &res_g, &y_g, &gamma_g, &beta_g}) {
    ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  }
  ASSERT_TRUE(mean_g.ok() && rstd_g.ok()) << "cudaMalloc failed";
  absl::Status st = cuda::ResidualLayerNormForward(
      c.branch ? res_g.View({N, C}) : Tensor(), y_g.View({N, C}), mean_g.View({N}),
      rstd_g.View({N}), in_g.View({N, C}), c.branch ? br_g.View({N, C}) : Tensor(),
      gamma_g.View({C}), beta_g.View({C}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  // x: the LayerNorm's input as stored, which the backward reads.
  std::vector<float> x = residual_in;
  if (c.branch) {
    x = res_g.Download();
    EXPECT_TRUE(x == stored(res_c))
        << "residual_out differs from the CPU's fp32 add" << (bf16 ? ", rounded to bf16" : "");
  }
  if (bf16) {
    // The GPU normalized the rounded residual_out: so does the reference.
    std::vector<float> x_c = x;
    ASSERT_TRUE(cpu.ResidualLayerNormForward(Tensor(), Cpu(y_c, {N, C}), Cpu(mean_c, {N}),
                                             Cpu(rstd_c, {N}), Cpu(x_c, {N, C}), Tensor(),
                                             Cpu(g_c, {C}), Cpu(b_c, {C}))
                    .ok());
  }
  ExpectClose("y", y_g.Download(), y_c, kActTol, 1.0, r16);
  ExpectClose("mean", mean_g.Download(), mean_c, kActTol);
  ExpectClose("rstd", rstd_g.Download(), rstd_c, kActTol);

  // ---- CPU reference backward: on x and on the reference's mean and rstd ----
  std::vector<float> x_c = x, dy_c = dy, dres_c = d_residual0, dg_c = dgamma0, db_c = dbeta0;
  ASSERT_TRUE(cpu.ResidualLayerNormBackward(Cpu(dres_c, {N, C}), Cpu(dg_c, {C}), Cpu(db_c, {C}),
                                            Cpu(dy_c, {N, C}), Cpu(x_c, {N, C}), Cpu(g_c, {C}),
                                            Cpu(mean_c, {N}), Cpu(rstd_c, {N}))
                  .ok());

  // ---- GPU backward (on the same x, mean, rstd) ----
  GpuStored x_g(x, dt, offset), dy_g(dy, dt, offset), dres_g(d_residual0, dt, offset);
  GpuFloats dg_g(C), db_g(C);
  GpuFloats scratch(std::max<int64_t>(1, cuda::ResidualLayerNormBackwardScratchFloats(N, C)));
  for (const GpuStored* b : {&x_g, &dy_g, &dres_g}) ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  for (const GpuFloats* b : {&dg_g, &db_g, &scratch}) ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  mean_g.Upload(mean_c);
  rstd_g.Upload(rstd_c);
  auto run_backward = [&]() {
    dres_g.Upload(d_residual0);
    dg_g.Upload(dgamma0);
    db_g.Upload(dbeta0);
    return cuda::ResidualLayerNormBackward(
        dres_g.View({N, C}), dg_g.View({C}), db_g.View({C}), dy_g.View({N, C}), x_g.View({N, C}),
        gamma_g.View({C}), mean_g.View({N}), rstd_g.View({N}),
        scratch.View({cuda::ResidualLayerNormBackwardScratchFloats(N, C)}));
  };
  st = run_backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> dres = dres_g.Download(), dg = dg_g.Download(), db = db_g.Download();
  ExpectClose("d_residual", dres, dres_c, kActTol, 1.0, r16);
  const double rows_scale = std::sqrt(static_cast<double>(N));
  ExpectClose("dgamma", dg, dg_c, kParamGradTol, rows_scale);
  ExpectClose("dbeta", db, db_c, kParamGradTol, rows_scale);

  // ---- determinism: a second run gives the same bits ----
  st = run_backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(dres_g.Download() == dres) << "d_residual not bitwise reproducible";
  EXPECT_TRUE(dg_g.Download() == dg) << "dgamma not bitwise reproducible";
  EXPECT_TRUE(db_g.Download() == db) << "dbeta not bitwise reproducible";
}

TEST_P(ResidualLayerNormGpuTest, MatchesCpu) { CompareWithCpu(GetParam(), 0); }

// GPT-2 widths (768, 1600) and smaller ones, a C not a multiple of 4 (99:
// scalar kernels), C = 100 (vectors of 4 floats, odd number of vectors per
// row; not a multiple of 8, so scalar kernels for bf16), and wide rows that
// need more than the default 48 KiB of shared memory. bf16 on a subset (the
// simulator is slow): every width, fewer row counts, and one case with more
// rows (2100) than the backward's grid has warps (2048).
INSTANTIATE_TEST_SUITE_P(Shapes, ResidualLayerNormGpuTest, testing::ValuesIn([] {
                           std::vector<Case> cases;
                           for (int64_t N : {1, 5, 64, 1000, 4096}) {
                             for (int64_t C : {99, 100, 128, 384, 768, 1600}) {
                               for (bool branch : {true, false}) cases.push_back({N, C, branch});
                             }
                           }
                           cases.push_back({37, 8192, true});
                           cases.push_back({19, 12345, true});
                           cases.push_back({3, 13000, false});
                           for (int64_t N : {1, 5, 300}) {
                             for (int64_t C : {99, 100, 128, 384, 768, 1600}) {
                               for (bool branch : {true, false}) {
                                 cases.push_back({N, C, branch, DType::kBF16});
                               }
                             }
                           }
                           // More rows than the backward grid has warps: each warp takes several.
                           cases.push_back({2100, 128, true, DType::kBF16});
                           cases.push_back({37, 8192, true, DType::kBF16});
                           cases.push_back({19, 12345, true, DType::kBF16});
                           cases.push_back({3, 13000, false, DType::kBF16});
                           return cases;
                         }()),
                         CaseName);

TEST_F(ResidualLayerNormGpuTest, UnalignedViewsUseScalarKernels) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    CompareWithCpu({33, 768, true, dt}, 1);
    CompareWithCpu({33, 768, false, dt}, 1);
  }
}

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(ResidualLayerNormGpuArgs, RejectsBadArguments) {
  float fake[4];  // never dereferenced: every call below fails validation
  auto gpu = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kF32, dims, Device::kCuda);
  };
  const Tensor host = Tensor::F32(fake, {4, 8}, Device::kCpu);

  absl::Status s = cuda::ResidualLayerNormForward(gpu({4, 8}), gpu({4, 8}), gpu({4}), gpu({4}),
                                                  host, gpu({4, 8}), gpu({8}), gpu({8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a CUDA tensor"), std::string::npos) << s;

  s = cuda::ResidualLayerNormForward(gpu({4, 8}), gpu({4, 8}), gpu({4}), gpu({4}), gpu({4, 8}),
                                     Tensor(), gpu({8}), gpu({8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "residual_out without branch";

  s = cuda::ResidualLayerNormForward(Tensor(), gpu({4, 8}), gpu({4}), gpu({4}), gpu({4, 8}),
                                     Tensor(), gpu({7}), gpu({8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "gamma of the wrong size";

  s = cuda::ResidualLayerNormBackward(gpu({4, 8}), gpu({8}), gpu({8}), gpu({4, 8}), gpu({4, 8}),
                                      gpu({8}), gpu({4}), gpu({4}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "missing scratch";
  EXPECT_NE(s.message().find("scratch"), std::string::npos) << s;

  s = cuda::ResidualLayerNormBackward(gpu({4, 8}), gpu({8}), gpu({8}), gpu({4, 8}), gpu({2, 8}),
                                      gpu({8}), gpu({4}), gpu({4}), gpu({1024}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "x rows differ from dy rows";

  // Storage: one dtype per call for activations and weights (f32 or bf16);
  // statistics, dgamma/dbeta and the scratch f32 whatever the storage (the
  // accepted combinations run in the cases above).
  auto b16 = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kBF16, dims, Device::kCuda);
  };
  s = cuda::ResidualLayerNormForward(b16({4, 8}), b16({4, 8}), gpu({4}), gpu({4}), b16({4, 8}),
                                     gpu({4, 8}), b16({8}), b16({8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 residual_in, f32 branch";
  EXPECT_NE(s.message().find("branch"), std::string::npos) << s;
  s = cuda::ResidualLayerNormForward(gpu({4, 8}), gpu({4, 8}), gpu({4}), gpu({4}), gpu({4, 8}),
                                     gpu({4, 8}), b16({8}), gpu({8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "f32 activations, bf16 gamma";
  s = cuda::ResidualLayerNormForward(Tensor(), b16({4, 8}), b16({4}), gpu({4}), b16({4, 8}),
                                     Tensor(), b16({8}), b16({8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 mean";
  s = cuda::ResidualLayerNormForward(Tensor(), gpu({4, 8}), gpu({4}), gpu({4}), b16({4, 8}),
                                     Tensor(), b16({8}), b16({8}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 residual_in, f32 y";
  const Tensor ints(fake, DType::kI32, {4, 8}, Device::kCuda);
  const Tensor ints_c(fake, DType::kI32, {8}, Device::kCuda);
  s = cuda::ResidualLayerNormForward(Tensor(), ints, gpu({4}), gpu({4}), ints, Tensor(), ints_c,
                                     ints_c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "i32 storage";
  EXPECT_NE(s.message().find("f32 or bf16"), std::string::npos) << s;
  s = cuda::ResidualLayerNormBackward(b16({4, 8}), gpu({8}), gpu({8}), gpu({4, 8}), b16({4, 8}),
                                      b16({8}), gpu({4}), gpu({4}), gpu({1024}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 x, f32 dy";
  EXPECT_NE(s.message().find("dy"), std::string::npos) << s;
  s = cuda::ResidualLayerNormBackward(gpu({4, 8}), gpu({8}), gpu({8}), b16({4, 8}), b16({4, 8}),
                                      b16({8}), gpu({4}), gpu({4}), gpu({1024}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 x, f32 d_residual";
  s = cuda::ResidualLayerNormBackward(b16({4, 8}), b16({8}), gpu({8}), b16({4, 8}), b16({4, 8}),
                                      b16({8}), gpu({4}), gpu({4}), gpu({1024}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 dgamma";
}

}  // namespace
}  // namespace ladder
