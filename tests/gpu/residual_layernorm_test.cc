// The CUDA residual+LayerNorm kernels (kernels/residual_layernorm.cu) against
// the CPU reference (CpuBackend) on random inputs: forward outputs
// (residual_out, y, mean, rstd) and backward (d_residual accumulated onto a
// non-zero start, dgamma/dbeta accumulated), for rows 1..4096, channels from
// 99 (scalar path) to 12345 (shared-memory opt-in path), with and without the
// residual add; plus bitwise determinism and the argument checks.
//
// Tolerances, per element, with ref the CPU value and N the rows:
//   |gpu - ref| <= 1e-5 * (1 + |ref|)         activations and statistics
//   |gpu - ref| <= 1e-4 * (sqrt(N) + |ref|)   dgamma, dbeta: sums over N rows of
//     terms of size ~1, summed in different orders on the two sides; their
//     rounding grows like sqrt(N) whatever the sum's value (which can be ~0).
// residual_out is an fp32 add in both: it must match exactly.
//
// Without a GPU every test that needs one skips with the reason; the argument
// checks still run. Inputs come from Philox (seed 20240607, or
// LADDER_GPU_TEST_SEED), so a failure reproduces.
#include "src/backend/cuda/residual_layernorm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::GpuFloats;
using gpu_test::Normal;

// |got - want| <= tol * (scale + |want|).
void ExpectClose(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                 float tol, double scale = 1.0) {
  gpu_test::ExpectClose(what, got, want, tol, tol * scale);
}

constexpr float kActTol = 1e-5f;
constexpr float kParamGradTol = 1e-4f;

struct Case {
  int64_t N, C;
  bool branch;
};

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  return absl::StrCat("N", info.param.N, "_C", info.param.C, info.param.branch ? "_add" : "_noadd");
}

class ResidualLayerNormGpuTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

// One full comparison; `offset` shifts every GPU buffer by that many floats
// (offset 1 defeats 16-byte alignment and forces the scalar kernels).
void CompareWithCpu(const Case& c, int64_t offset) {
  const int64_t N = c.N, C = c.C, NC = N * C;
  const uint64_t s = static_cast<uint64_t>(N * 100003 + C * 7 + (c.branch ? 1 : 0)) * 16;

  // Inputs: a residual stream with an offset and scale (to exercise the mean
  // and variance), a branch, weights near 1 and 0, an upstream gradient.
  const std::vector<float> residual_in = Normal(NC, s + 0, 0.5f, 2.0f);
  const std::vector<float> branch = Normal(NC, s + 1, 0.0f, 1.0f);
  const std::vector<float> gamma = Normal(C, s + 2, 1.0f, 0.1f);
  const std::vector<float> beta = Normal(C, s + 3, 0.0f, 0.1f);
  const std::vector<float> dy = Normal(NC, s + 4, 0.0f, 1.0f);
  const std::vector<float> d_residual0 = Normal(NC, s + 5, 0.0f, 1.0f);
  const std::vector<float> dgamma0 = Normal(C, s + 6, 0.0f, 1.0f);
  const std::vector<float> dbeta0 = Normal(C, s + 7, 0.0f, 1.0f);

  // ---- CPU reference ----
  CpuBackend cpu;
  std::vector<float> in_c = residual_in, br_c = branch, g_c = gamma, b_c = beta;
  std::vector<float> res_c(c.branch ? NC : 0), y_c(NC), mean_c(N), rstd_c(N);
  ASSERT_TRUE(cpu.ResidualLayerNormForward(
                     c.branch ? Tensor::F32(res_c.data(), {N, C}, Device::kCpu) : Tensor(),
                     Tensor::F32(y_c.data(), {N, C}, Device::kCpu), Tensor::F32(mean_c.data(), {N}, Device::kCpu),
                     Tensor::F32(rstd_c.data(), {N}, Device::kCpu), Tensor::F32(in_c.data(), {N, C}, Device::kCpu),
                     c.branch ? Tensor::F32(br_c.data(), {N, C}, Device::kCpu) : Tensor(),
                     Tensor::F32(g_c.data(), {C}, Device::kCpu), Tensor::F32(b_c.data(), {C}, Device::kCpu))
                  .ok());
  // The backward's x is the LayerNorm's input; both sides get the CPU's x,
  // mean and rstd, so the backward is compared on identical inputs.
  const std::vector<float>& x = c.branch ? res_c : residual_in;
  std::vector<float> x_c = x, dy_c = dy, dres_c = d_residual0, dg_c = dgamma0, db_c = dbeta0;
  ASSERT_TRUE(cpu.ResidualLayerNormBackward(
                     Tensor::F32(dres_c.data(), {N, C}, Device::kCpu), Tensor::F32(dg_c.data(), {C}, Device::kCpu),
                     Tensor::F32(db_c.data(), {C}, Device::kCpu), Tensor::F32(dy_c.data(), {N, C}, Device::kCpu),
                     Tensor::F32(x_c.data(), {N, C}, Device::kCpu), Tensor::F32(g_c.data(), {C}, Device::kCpu),
                     Tensor::F32(mean_c.data(), {N}, Device::kCpu), Tensor::F32(rstd_c.data(), {N}, Device::kCpu))
                  .ok());

  // ---- GPU forward ----
  GpuFloats in_g(NC, offset), br_g(NC, offset), res_g(NC, offset), y_g(NC, offset);
  GpuFloats mean_g(N), rstd_g(N), gamma_g(C, offset), beta_g(C, offset);
  for (const GpuFloats* b : {&in_g, &br_g, &res_g, &y_g, &mean_g, &rstd_g, &gamma_g, &beta_g}) {
    ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  }
  in_g.Upload(residual_in);
  br_g.Upload(branch);
  gamma_g.Upload(gamma);
  beta_g.Upload(beta);
  absl::Status st = cuda::ResidualLayerNormForward(
      c.branch ? res_g.View({N, C}) : Tensor(), y_g.View({N, C}), mean_g.View({N}), rstd_g.View({N}),
      in_g.View({N, C}), c.branch ? br_g.View({N, C}) : Tensor(), gamma_g.View({C}), beta_g.View({C}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  if (c.branch) {
    EXPECT_TRUE(res_g.Download() == res_c) << "residual_out differs from the CPU's fp32 add";
  }
  ExpectClose("y", y_g.Download(), y_c, kActTol);
  ExpectClose("mean", mean_g.Download(), mean_c, kActTol);
  ExpectClose("rstd", rstd_g.Download(), rstd_c, kActTol);

  // ---- GPU backward (on the CPU's x, mean, rstd) ----
  GpuFloats x_g(NC, offset), dy_g(NC, offset), dres_g(NC, offset), dg_g(C), db_g(C);
  GpuFloats scratch(std::max<int64_t>(1, cuda::ResidualLayerNormBackwardScratchFloats(N, C)));
  for (const GpuFloats* b : {&x_g, &dy_g, &dres_g, &dg_g, &db_g, &scratch}) {
    ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  }
  x_g.Upload(x);
  dy_g.Upload(dy);
  mean_g.Upload(mean_c);
  rstd_g.Upload(rstd_c);
  auto run_backward = [&]() {
    dres_g.Upload(d_residual0);
    dg_g.Upload(dgamma0);
    db_g.Upload(dbeta0);
    return cuda::ResidualLayerNormBackward(
        dres_g.View({N, C}), dg_g.View({C}), db_g.View({C}), dy_g.View({N, C}), x_g.View({N, C}), gamma_g.View({C}),
        mean_g.View({N}), rstd_g.View({N}),
        scratch.View({cuda::ResidualLayerNormBackwardScratchFloats(N, C)}));
  };
  st = run_backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> dres = dres_g.Download(), dg = dg_g.Download(), db = db_g.Download();
  ExpectClose("d_residual", dres, dres_c, kActTol);
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
// scalar kernels), C = 100 (vectors, odd number of vectors per row), and two
// wide rows that need more than the default 48 KiB of shared memory.
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
                           return cases;
                         }()),
                         CaseName);

TEST_F(ResidualLayerNormGpuTest, UnalignedViewsUseScalarKernels) {
  CompareWithCpu({33, 768, true}, 1);
  CompareWithCpu({33, 768, false}, 1);
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
}

}  // namespace
}  // namespace ladder
