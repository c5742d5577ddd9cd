// The CUDA elementwise kernels (kernels/elementwise.cu) against the CPU
// reference (CpuBackend): GeluForward, GeluBackward (also in place, dinp
// aliasing dout) and ResidualAdd (also in place, out aliasing a and b), on
// fresh Philox inputs of many sizes: n = 1, 3, 5, odd sizes that leave a
// scalar tail after the 16-byte vectors, multiples of 4 and 8 and of the
// block, GPT-2 shapes, and views shifted by one element (misaligned: scalar
// kernels); each in both storage dtypes, f32 and bf16 (every tensor of the
// call in that dtype). For bf16 the inputs are rounded to bf16 first
// (Bf16Rounded) and the CPU reference, fp32, runs on those rounded values, so
// both sides see the same numbers. Outputs are poisoned with NaN first, so a
// skipped element fails.
//
// Tolerances, per element, with ref the CPU value and eps = 2^-23:
//   GELU forward: |gpu - ref| <= 1e-6 + 2e-6 |ref|. Same formula in the
//     same order; the exp differs (CUDA's expf and the CPU's polynomial ExpF
//     are each within ~2 ulp) and either compiler may fuse a multiply and an
//     add, so a few ulp, plus a little absolute slack near gelu(x) = 0.
//   GELU backward: |gpu - ref| <= 2e-6 |ref| + 4 eps |dout| (1 + |2 x du|),
//     du = sqrt(2/pi)(1 + 3 * 0.044715 x^2). For x >~ 3, sig = sigmoid(2u)
//     rounds to within a few ulp of 1 and 1 - sig cancels: one ulp of sig
//     (eps/2) becomes an absolute error of eps/2 * |2 x du| in gelu'. An exp
//     two ulp off reaches 0.87 of a flat 1e-6 + 2e-6 |ref| at x = 4.25, so
//     the bound names the cancellation instead.
//   ResidualAdd: bitwise (one fp32 add on both sides).
//   bf16 storage: the output is the fp32 result rounded once to bf16, so
//     both GELU bounds grow by kBf16Rounding |ref| (2^-8 |ref|, one rounding
//     to nearest): |gpu - ref| <= 2^-8 |ref| + (the fp32 bound). ResidualAdd
//     in bf16 is bitwise the CPU's fp32 sum rounded to nearest even
//     (Bf16Rounded(ref), within 2^-8 |ref| of it): the same fp32 add, then
//     the same rounding on both sides.
// Determinism: elementwise ops have no reduction; a second run is compared
// bitwise anyway. A call mixing f32 and bf16 tensors is InvalidArgument,
// naming the odd tensor.
#include "src/backend/cuda/elementwise.h"

#include <cmath>
#include <cstdint>
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
using gpu_test::ExpectClose;
using gpu_test::GpuStored;
using gpu_test::kBf16Rounding;
using gpu_test::Normal;
using gpu_test::Poison;

constexpr double kGeluRel = 2e-6;
constexpr double kGeluAbs = 1e-6;
constexpr double kEps = 1.0 / (1 << 23);

// The backward's per-element bound (see the header comment); `rounding` is
// the relative error of the output's storage (0 for f32, 2^-8 for bf16).
std::vector<double> GeluBackwardBound(const std::vector<float>& x, const std::vector<float>& dout,
                                      const std::vector<float>& ref, double rounding) {
  std::vector<double> bound(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * xi * xi);
    bound[i] = (kGeluRel + rounding) * std::fabs(ref[i]) +
               4 * kEps * std::fabs(dout[i]) * (1.0 + std::fabs(2.0 * xi * du));
  }
  return bound;
}


struct Shape {
  int64_t N, C;
};

using Param = std::tuple<Shape, int64_t, DType>;

class ElementwiseGpuTest : public gpu_test::GpuTest, public testing::WithParamInterface<Param> {
 protected:
  // offset 0: aligned buffers (vector kernels when n allows); 1: misaligned.
  int64_t N() const { return std::get<0>(GetParam()).N; }
  int64_t C() const { return std::get<0>(GetParam()).C; }
  int64_t offset() const { return std::get<1>(GetParam()); }
  DType dtype() const { return std::get<2>(GetParam()); }
  bool bf16() const { return dtype() == DType::kBF16; }
  // Inputs as the device will hold them: rounded to bf16 when it stores bf16.
  std::vector<float> Stored(std::vector<float> x) const {
    return bf16() ? Bf16Rounded(std::move(x)) : x;
  }
  uint64_t stream(int k) const { return static_cast<uint64_t>(N() * 7919 + C()) * 8 + k; }
};

TEST_P(ElementwiseGpuTest, GeluMatchesCpu) {
  const int64_t N = this->N(), C = this->C(), n = N * C;
  const DType dt = dtype();
  // Inputs spread over GELU's whole shape: N(0, 2) reaches |x| ~ 8.
  std::vector<float> x = Stored(Normal(n, stream(0), 0.0f, 2.0f));
  std::vector<float> dout = Stored(Normal(n, stream(1)));
  CpuBackend cpu;
  std::vector<float> y_ref(n), dx_ref(n);
  ASSERT_TRUE(cpu.GeluForward(Tensor::F32(y_ref.data(), {N, C}, Device::kCpu),
                              Tensor::F32(x.data(), {N, C}, Device::kCpu))
                  .ok());
  ASSERT_TRUE(cpu.GeluBackward(Tensor::F32(dx_ref.data(), {N, C}, Device::kCpu),
                               Tensor::F32(dout.data(), {N, C}, Device::kCpu),
                               Tensor::F32(x.data(), {N, C}, Device::kCpu))
                  .ok());

  GpuStored x_g(x, dt, offset()), y_g(Poison(n), dt, offset()), d_g(dout, dt, offset()),
      dx_g(Poison(n), dt, offset());
  ASSERT_TRUE(x_g.ok() && y_g.ok() && d_g.ok() && dx_g.ok());
  absl::Status st = cuda::GeluForward(y_g.View({N, C}), x_g.View({N, C}));
  ASSERT_TRUE(st.ok()) << st;
  st = cuda::GeluBackward(dx_g.View({N, C}), d_g.View({N, C}), x_g.View({N, C}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> y = y_g.Download(), dx = dx_g.Download();
  const double rounding = bf16() ? kBf16Rounding : 0.0;
  ExpectClose("gelu", y, y_ref, kGeluRel + rounding, kGeluAbs);
  gpu_test::ExpectWithin("dinp", dx, dx_ref, GeluBackwardBound(x, dout, dx_ref, rounding));

  // In place: dinp aliases dout. Same bits as the out-of-place run.
  st = cuda::GeluBackward(d_g.View({N, C}), d_g.View({N, C}), x_g.View({N, C}));
  ASSERT_TRUE(st.ok()) << st;
  // And a second forward into the same output: deterministic.
  y_g.Upload(Poison(n));
  st = cuda::GeluForward(y_g.View({N, C}), x_g.View({N, C}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("dinp in place (aliasing dout)", d_g.Download(), dx);
  ExpectBitwise("gelu, second run", y_g.Download(), y);
}

TEST_P(ElementwiseGpuTest, ResidualAddMatchesCpu) {
  const int64_t N = this->N(), C = this->C(), n = N * C;
  const DType dt = dtype();
  const std::vector<float> a = Stored(Normal(n, stream(2), 0.5f, 2.0f));
  const std::vector<float> b = Stored(Normal(n, stream(3)));
  std::vector<float> a_c = a, b_c = b, ref(n);
  CpuBackend cpu;
  ASSERT_TRUE(cpu.ResidualAdd(Tensor::F32(ref.data(), {N, C}, Device::kCpu),
                              Tensor::F32(a_c.data(), {N, C}, Device::kCpu),
                              Tensor::F32(b_c.data(), {N, C}, Device::kCpu))
                  .ok());
  // bf16: the same fp32 sum, rounded once to nearest even (see the header).
  if (bf16()) ref = Bf16Rounded(ref);

  GpuStored a_g(a, dt, offset()), b_g(b, dt, offset()), out_g(Poison(n), dt, offset());
  ASSERT_TRUE(a_g.ok() && b_g.ok() && out_g.ok());
  absl::Status st = cuda::ResidualAdd(out_g.View({N, C}), a_g.View({N, C}), b_g.View({N, C}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("out", out_g.Download(), ref);

  // out aliasing a, then (on fresh copies) out aliasing b.
  st = cuda::ResidualAdd(a_g.View({N, C}), a_g.View({N, C}), b_g.View({N, C}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("out aliasing a", a_g.Download(), ref);
  a_g.Upload(a);
  st = cuda::ResidualAdd(b_g.View({N, C}), a_g.View({N, C}), b_g.View({N, C}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("out aliasing b", b_g.Download(), ref);
}

// n = N*C: 1, 3 (tail only), 5 and 99 and 1001 (vectors + tail), 4 (one f32
// vector, a bf16 tail), 128 and 256*4 (no tail in either dtype), GPT-2's MLP
// width (768*4 = 3072) over odd row counts, and one size past a block's 256
// vectors with a tail. Each aligned and misaligned, in f32 and in bf16.
INSTANTIATE_TEST_SUITE_P(Shapes, ElementwiseGpuTest,
                         testing::Combine(testing::Values(Shape{1, 1}, Shape{1, 3}, Shape{5, 1},
                                                          Shape{3, 33}, Shape{1, 4}, Shape{4, 32},
                                                          Shape{1, 1024}, Shape{7, 143},
                                                          Shape{13, 3072}, Shape{3, 1027}),
                                          testing::Values(int64_t{0}, int64_t{1}),
                                          testing::Values(DType::kF32, DType::kBF16)),
                         [](const testing::TestParamInfo<Param>& info) {
                           const Shape s = std::get<0>(info.param);
                           return absl::StrCat("N", s.N, "_C", s.C,
                                               std::get<1>(info.param) ? "_misaligned" : "", "_",
                                               DTypeName(std::get<2>(info.param)));
                         });

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(ElementwiseGpuArgs, RejectsBadArguments) {
  float fake[8];  // never dereferenced: every call below fails validation
  auto gpu = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kF32, dims, Device::kCuda);
  };
  const Tensor host = Tensor::F32(fake, {2, 4}, Device::kCpu);
  absl::Status s = cuda::GeluForward(gpu({2, 4}), host);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a CUDA tensor"), std::string::npos) << s;
  s = cuda::GeluForward(gpu({2, 3}), gpu({2, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "out of the wrong shape";
  s = cuda::GeluBackward(gpu({2, 4}), gpu({4, 2}), gpu({2, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "dout of the wrong shape";
  s = cuda::ResidualAdd(gpu({2, 4}), gpu({2, 4}), Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "missing b";
  s = cuda::ResidualAdd(gpu({8}), gpu({2, 4}), gpu({2, 4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "out with another last dim";
}

// One storage dtype per call: any tensor of the other dtype (or of a dtype
// that is not a storage dtype) is InvalidArgument naming it.
TEST(ElementwiseGpuArgs, RejectsMixedDTypes) {
  float fake[8];  // never dereferenced: every call below fails validation
  auto gpu = [&](DType dt) { return Tensor(fake, dt, {2, 4}, Device::kCuda); };
  const Tensor f = gpu(DType::kF32), h = gpu(DType::kBF16);
  auto expect_names = [](const absl::Status& s, const std::string& what) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(absl::StrCat(": ", what, " has shape")), std::string::npos) << s;
    EXPECT_NE(s.message().find("wrong dtype"), std::string::npos) << s;
  };
  expect_names(cuda::GeluForward(h, f), "out");
  expect_names(cuda::GeluForward(f, h), "out");
  expect_names(cuda::GeluBackward(h, h, f), "dout");
  expect_names(cuda::GeluBackward(f, h, h), "dinp");
  expect_names(cuda::ResidualAdd(h, h, f), "b");
  expect_names(cuda::ResidualAdd(f, h, h), "out");
  expect_names(cuda::ResidualAdd(h, f, f), "out");
  const absl::Status s = cuda::GeluForward(gpu(DType::kI32), gpu(DType::kI32));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("inp must be f32 or bf16"), std::string::npos) << s;
}

}  // namespace
}  // namespace ladder
