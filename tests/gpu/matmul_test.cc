// The CUDA backend's matmuls (src/backend/cuda/matmul.h: cuBLASLt with the
// bias epilogue, the backward's two products and the bias-gradient kernel)
// against the CPU backend on random inputs: shapes from one row to GPT-2's,
// and odd ones (N, C, OC not multiples of any tile), with and without bias,
// dinp skipped or not; dweight and dbias accumulate onto non-zero values.
// Under the simulator this checks the operand layouts and transposes (its
// cuBLASLt is a host GEMM); on a GPU, cuBLASLt itself.
//
// GeluForward (the GELU_AUX_BIAS epilogue) is checked on the same inputs:
// pre equal to the forward's out, out = gelu(pre) as the CPU's GeluForward;
// GeluBackward (the DGELU epilogue) against the CPU's MatmulGeluBackward.
//
// Every case runs with fp32 and with bf16 storage (backend.h "Precision"):
// in bf16, inp, weight, bias, dout, out and dinp are bf16 (products on the
// tensor cores, fp32 accumulation) and dweight, dbias stay fp32; the CPU
// reference runs in fp32 on the same bf16-rounded inputs. Outputs are
// poisoned with NaN first.
//
// Tolerance, per element: |dev - cpu| <= 1e-5 * |cpu| + 2e-6 * sqrt(K), with
// K the length of the dot products: both sides sum K products of unit-size
// terms in different orders (OpenBLAS's blocking, cuBLASLt's tiles), so the
// rounding difference grows like sqrt(K). bf16 outputs (out, dinp) add one
// final rounding, 2^-8 |cpu|; the fp32 gradients keep the fp32 bound (the
// products of bf16 values are exact in fp32, so only the order differs).
#include "src/backend/cuda/matmul.h"

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/cuda/bias_grad.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::GpuFloats;
using gpu_test::Normal;

// Half the absolute error of a fast hardware tanh (2^-10.7), for GELU
// epilogues.
constexpr double kTanhApprox = 3e-4;

// `stored`: the output is in the storage dtype (bf16 adds one rounding).
void ExpectMatches(const std::string& what, const std::vector<float>& got,
                   const std::vector<float>& want, int64_t K, DType stored = DType::kF32) {
  const double rel = 1e-5 + (stored == DType::kBF16 ? gpu_test::kBf16Rounding : 0.0);
  gpu_test::ExpectClose(what, got, want, rel, 2e-6 * std::sqrt(static_cast<double>(K)));
}

struct Case {
  int64_t N, C, OC;
  bool bias, dinp;
};

class MatmulGpuTest : public gpu_test::GpuTest,
                      public testing::WithParamInterface<std::tuple<Case, DType>> {};

TEST_P(MatmulGpuTest, MatchesCpu) {
  const Case c = std::get<0>(GetParam());
  const DType dt = std::get<1>(GetParam());
  const int64_t N = c.N, C = c.C, OC = c.OC;
  const uint64_t s = static_cast<uint64_t>(N * 7919 + C * 104729 + OC) * 8;
  // What the device stores, as the CPU sees it (rounded to bf16 in bf16).
  auto stored = [&](std::vector<float> x) {
    return dt == DType::kBF16 ? gpu_test::Bf16Rounded(std::move(x)) : x;
  };
  std::vector<float> inp = stored(Normal(N * C, s)), w = stored(Normal(OC * C, s + 1, 0.0f, 0.05f));
  std::vector<float> b = stored(Normal(OC, s + 2)), dout = stored(Normal(N * OC, s + 3));
  std::vector<float> dw0 = Normal(OC * C, s + 4), db0 = Normal(OC, s + 5);

  CpuBackend cpu;
  std::vector<float> out_c(N * OC), dinp_c(N * C), dw_c = dw0, db_c = db0;
  ASSERT_TRUE(cpu.MatmulForward(Tensor::F32(out_c.data(), {N, OC}, Device::kCpu),
                                Tensor::F32(inp.data(), {N, C}, Device::kCpu),
                                Tensor::F32(w.data(), {OC, C}, Device::kCpu),
                                c.bias ? Tensor::F32(b.data(), {OC}, Device::kCpu) : Tensor())
                  .ok());
  ASSERT_TRUE(
      cpu.MatmulBackward(c.dinp ? Tensor::F32(dinp_c.data(), {N, C}, Device::kCpu) : Tensor(),
                         Tensor::F32(dw_c.data(), {OC, C}, Device::kCpu),
                         c.bias ? Tensor::F32(db_c.data(), {OC}, Device::kCpu) : Tensor(),
                         Tensor::F32(dout.data(), {N, OC}, Device::kCpu),
                         Tensor::F32(inp.data(), {N, C}, Device::kCpu),
                         Tensor::F32(w.data(), {OC, C}, Device::kCpu))
          .ok());

  cudaStream_t stream = nullptr;
  ASSERT_CUDA_OK(cudaStreamCreate(&stream));
  auto mm = cuda::Matmuls::Create(stream);
  ASSERT_TRUE(mm.ok()) << mm.status();
  gpu_test::GpuStored inp_g(inp, dt), w_g(w, dt), b_g(b, dt), dout_g(dout, dt);
  gpu_test::GpuStored out_g(gpu_test::Poison(N * OC), dt), dinp_g(gpu_test::Poison(N * C), dt);
  GpuFloats dw_g(dw0), db_g(db0);
  GpuFloats scratch(std::max<int64_t>(1, cuda::BiasGradScratchFloats(N, OC)));
  absl::Status st = (*mm)->Forward(out_g.View({N, OC}), inp_g.View({N, C}), w_g.View({OC, C}),
                                   c.bias ? b_g.View({OC}) : Tensor());
  ASSERT_TRUE(st.ok()) << st;
  st = (*mm)->Backward(c.dinp ? dinp_g.View({N, C}) : Tensor(), dw_g.View({OC, C}),
                       c.bias ? db_g.View({OC}) : Tensor(), dout_g.View({N, OC}),
                       inp_g.View({N, C}), w_g.View({OC, C}), scratch.View({scratch.size()}));
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
  ExpectMatches("out", out_g.Download(), out_c, C, dt);
  if (c.dinp) ExpectMatches("dinp", dinp_g.Download(), dinp_c, OC, dt);
  ExpectMatches("dweight", dw_g.Download(), dw_c, N);
  if (c.bias) {
    ExpectMatches("dbias", db_g.Download(), db_c, N);
  } else {
    gpu_test::ExpectBitwise("dbias untouched", db_g.Download(), db0);
  }

  // The fused up projection (GELU_AUX_BIAS epilogue): pre as the forward's
  // out, and out = gelu(pre). cuBLASLt evaluates GPT-2's tanh form, the CPU
  // its sigmoid form with its own exp; pre's own error passes through gelu'
  // (at most 1.13, hence 1.2x the matmul's bound), and a GPU epilogue may
  // use a fast tanh (tanh.approx.f32: about 2^-11 absolute), which moves
  // gelu(x) = x (1 + tanh u) / 2 by up to kTanhApprox |x|. OC not a multiple
  // of 8 is Unimplemented (the backend then runs the two ops).
  gpu_test::GpuStored pre_g(gpu_test::Poison(N * OC), dt), gelu_g(gpu_test::Poison(N * OC), dt);
  st = (*mm)->GeluForward(gelu_g.View({N, OC}), pre_g.View({N, OC}), inp_g.View({N, C}),
                          w_g.View({OC, C}), c.bias ? b_g.View({OC}) : Tensor());
  if (OC % 8 != 0) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  } else {
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    ExpectMatches("pre", pre_g.Download(), out_c, C, dt);
    std::vector<float> gelu_c(N * OC);
    ASSERT_TRUE(cpu.GeluForward(Tensor::F32(gelu_c.data(), {N, OC}, Device::kCpu),
                                Tensor::F32(out_c.data(), {N, OC}, Device::kCpu))
                    .ok());
    const double rel = 1e-5 + (dt == DType::kBF16 ? gpu_test::kBf16Rounding : 0.0);
    std::vector<double> bound(gelu_c.size());
    for (size_t i = 0; i < bound.size(); ++i) {
      bound[i] = 1.2 * rel * std::fabs(gelu_c[i]) + kTanhApprox * std::fabs(out_c[i]) + 1e-6 +
                 1.2 * 2e-6 * std::sqrt(static_cast<double>(C));
    }
    gpu_test::ExpectWithin("gelu(pre)", gelu_g.Download(), gelu_c, bound);
  }

  // The fused down-projection backward (DGELU epilogue): the projection's
  // input is gelu(pre) with pre = this case's inp, and dpre = (dout @ w) *
  // gelu'(pre), against the CPU's MatmulGeluBackward (its backward, then
  // its GELU backward). dpre's bound: dinp's, through gelu' (at most 1.13,
  // hence 1.2x), plus a fast tanh's error in gelu' (a change dt in tanh
  // moves gelu'(x) by at most (1/2 + |x| du) |dt|, du <= 2 for the inputs
  // here): 4 kTanhApprox (1 + |x|) |dout @ w|. C not a multiple of 8 is
  // Unimplemented (the backend then runs the two ops).
  if (c.dinp) {
    std::vector<float> act(N * C);
    ASSERT_TRUE(cpu.GeluForward(Tensor::F32(act.data(), {N, C}, Device::kCpu),
                                Tensor::F32(inp.data(), {N, C}, Device::kCpu))
                    .ok());
    act = stored(act);
    std::vector<float> dpre_c(N * C), gw_c = dw0, gb_c = db0;
    ASSERT_TRUE(
        cpu.MatmulGeluBackward(Tensor::F32(dpre_c.data(), {N, C}, Device::kCpu),
                               Tensor::F32(gw_c.data(), {OC, C}, Device::kCpu),
                               c.bias ? Tensor::F32(gb_c.data(), {OC}, Device::kCpu) : Tensor(),
                               Tensor::F32(dout.data(), {N, OC}, Device::kCpu),
                               Tensor::F32(act.data(), {N, C}, Device::kCpu),
                               Tensor::F32(w.data(), {OC, C}, Device::kCpu),
                               Tensor::F32(inp.data(), {N, C}, Device::kCpu))
            .ok());
    gpu_test::GpuStored act_g(act, dt), dpre_g(gpu_test::Poison(N * C), dt);
    GpuFloats gw_g(dw0), gb_g(db0);
    st = (*mm)->GeluBackward(dpre_g.View({N, C}), gw_g.View({OC, C}),
                             c.bias ? gb_g.View({OC}) : Tensor(), dout_g.View({N, OC}),
                             act_g.View({N, C}), w_g.View({OC, C}), inp_g.View({N, C}),
                             scratch.View({scratch.size()}));
    if (C % 8 != 0) {
      EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
    } else {
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
      const double rel = 1e-5 + (dt == DType::kBF16 ? gpu_test::kBf16Rounding : 0.0);
      std::vector<double> bound(dpre_c.size());
      for (size_t i = 0; i < bound.size(); ++i) {
        bound[i] = 1.2 * rel * std::fabs(dpre_c[i]) +
                   1.2 * 2e-6 * std::sqrt(static_cast<double>(OC)) +
                   4 * kTanhApprox * (1 + std::fabs(inp[i])) * std::fabs(dinp_c[i]);
      }
      gpu_test::ExpectWithin("dpre", dpre_g.Download(), dpre_c, bound);
      ExpectMatches("dweight (fused)", gw_g.Download(), gw_c, N);
      if (c.bias) ExpectMatches("dbias (fused)", gb_g.Download(), gb_c, N);
    }
  }
  mm->reset();
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

std::string CaseName(const testing::TestParamInfo<std::tuple<Case, DType>>& info) {
  const Case& c = std::get<0>(info.param);
  return absl::StrCat("N", c.N, "_C", c.C, "_OC", c.OC, c.bias ? "_bias" : "",
                      c.dinp ? "" : "_nodinp", "_", DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulGpuTest,
    testing::Combine(testing::Values(Case{1, 1, 1, true, true}, Case{1, 64, 3, true, true},
                                     Case{7, 13, 5, true, true}, Case{33, 65, 17, false, true},
                                     Case{64, 96, 288, true, false},
                                     Case{129, 100, 257, true, true},
                                     Case{256, 768, 96, false, true}),
                     testing::Values(DType::kF32, DType::kBF16)),
    CaseName);

class MatmulGpuArgs : public gpu_test::GpuTest {};

TEST_F(MatmulGpuArgs, RejectsMismatchedShapes) {
  auto mm = cuda::Matmuls::Create(nullptr);
  ASSERT_TRUE(mm.ok()) << mm.status();
  GpuFloats a(4 * 8), w(3 * 7), out(4 * 3);
  const absl::Status st =
      (*mm)->Forward(out.View({4, 3}), a.View({4, 8}), w.View({3, 7}), Tensor());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("weight"), std::string::npos) << st;
}

TEST_F(MatmulGpuArgs, RejectsMixedStorage) {
  auto mm = cuda::Matmuls::Create(nullptr);
  ASSERT_TRUE(mm.ok()) << mm.status();
  gpu_test::GpuStored a(std::vector<float>(4 * 8), DType::kBF16);
  GpuFloats w(3 * 8), out(4 * 3), dw(3 * 8);
  absl::Status st = (*mm)->Forward(out.View({4, 3}), a.View({4, 8}), w.View({3, 8}), Tensor());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "fp32 weight, bf16 input";
  gpu_test::GpuStored w16(std::vector<float>(3 * 8), DType::kBF16);
  gpu_test::GpuStored d16(std::vector<float>(4 * 3), DType::kBF16);
  st = (*mm)->Backward(Tensor(), w16.View({3, 8}), Tensor(), d16.View({4, 3}), a.View({4, 8}),
                       w16.View({3, 8}), Tensor());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "bf16 dweight";
  EXPECT_NE(st.message().find("dweight"), std::string::npos) << st;
}

}  // namespace
}  // namespace ladder
