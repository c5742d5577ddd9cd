// The CUDA attention kernels (kernels/attention.cu) against the CPU reference
// (CpuBackend), both kinds (kFlash against the CPU's kFlash, kNaive against
// its kNaive), on random qkv of several shapes: head sizes 24, 25 (odd), 32,
// 48, 64, 128, 256, T from 1 to 161 (never a multiple of the 32-row tile
// except T = 64), B = 1 and NH = 1 among them. Forward: out and lse. Backward:
// dqkv, given the same out and lse as the reference. Every GPU output is
// poisoned with NaN first, so an element no kernel wrote fails. Then bitwise
// run-to-run determinism of both passes, and the argument checks.
//
// Storage: every case runs twice, with qkv, out, dout and dqkv stored in f32
// and then in bf16 (lse stays f32). For bf16 the reference is the fp32 CPU
// backend on the *bf16-rounded* qkv and dout (Bf16Rounded), so both sides
// see the same values. Both backwards are then given the out and lse the
// bf16 forward produced (downloaded; out rounded as the GPU rounded it), as
// in training, where the backward reads what the forward saved (out for
// D = dO . O, lse to recompute P): the check is that the backward matches
// the reference on exactly the forward's outputs, whichever forward kernel
// made them. For f32 both backwards get the reference's out and lse.
//
// Tensor-core kernels (kernels/flash_attention_tc.cu): bf16 flash with head
// size 64 or 128 goes there, forward and backward (names end in _tc). Besides the shapes above it
// gets its own list (bf16 only): HS 64 and 128, T = 1, 17, 64, 65, 130, 256
// (one key; under one 64-row tile; whole tiles; one row past a tile; a
// partial third tile; four whole tiles), B 1-2, NH 1-3.
//
// Tolerances, per element, with ref the CPU value, tol = 2e-5 for the
// forward (out, lse) and 1e-4 for the backward (dqkv), and r = 2^-8
// (kBf16Rounding, the relative error of one rounding to bf16):
//   f32 out, lse, dqkv:  |gpu - ref| <= tol * (1 + |ref|)
//   bf16 lse (f32):      |gpu - ref| <= 2e-5 * (1 + |ref|)
//   bf16 out, dqkv:      |gpu - ref| <= r * |ref| + (1 + r) * tol * (1 + |ref|)
// The fp32 bounds: the two sides sum the same dot products and softmax rows
// in different orders and use different exp implementations (the CPU's flash
// kernel a Cephes polynomial, ~1 ulp; CUDA's expf, ~2 ulp), so they agree to
// a few float ulps of each score; the outputs are weighted means of V (well
// conditioned, so the error stays near float epsilon times the row length),
// and the gradients are sums over up to T such terms of both signs (dS =
// P * (dP - D) subtracts nearly equal numbers), hence the looser bound.
// The bf16 bounds: the kernels compute in fp32 on the same inputs, so before
// the store their value v is within the fp32 bound e of ref; the one
// rounding on store moves it by at most r * |v| <= r * (|ref| + e), hence
// r * |ref| plus the fp32 bound widened by the factor (1 + r). lse is not
// rounded (f32), so its bound is the fp32 one.
// The tensor-core forward's bounds (TensorCoreBounds), per element, with
// P[i,j] = exp(s_ij - lse_i) the reference's probabilities, s_ij =
// scale * q_i . k_j, A[i,c] = sum_j P[i,j] |v_j[c]| and
// d_i = HS * 2^-24 * max_j scale * sum_c |q_i[c] k_j[c]|:
//   out: |gpu - ref| <= r * |ref| + (1 + r) * ((r + 4 d_i) * A + tol * (1 + |ref| + A))
//   lse: |gpu - ref| <= tol * (1 + |ref|) + d_i
// d_i bounds the fp32 error of a score (HS products, exact for bf16 inputs,
// summed in fp32 in some order: at most HS roundings of 2^-24 relative of
// the sum of magnitudes); lse is 1-Lipschitz in the scores, hence its term.
// Each unnormalized weight p_j = exp(s_j - m) then has a relative error of
// at most 2 d_i (its score and the max), and the normalized weight p_j / l
// of 4 d_i; rounding p_j to bf16 before the P V mma adds r relative to each
// weight. A weighted sum moves by at most its weights' relative error times
// sum_j P |v_j| = A, hence (r + 4 d_i) * A; the fp32 products and sums
// (their order, expf's few ulps) are the tol term, widened by A because
// the terms of opposite signs can cancel (|ref| << A). Then the one bf16
// rounding on store as above. lse sums the unrounded p, so it has no r term.
// The tensor-core backward's bounds (TensorCoreGradBounds) follow the same
// argument: dV sums P dO, dK and dQ sum scale dS Q and scale dS K, with P
// and dS rounded to bf16 as mma operands, so with M the sum of the terms'
// magnitudes (Mv = sum_i P |dO|, Mk = scale sum_i |dS| |q|, Mq = scale
// sum_j |dS| |k|) and tol = 1e-4:
//   dqkv: |gpu - ref| <= r * |ref| + (1 + r) * ((r + 4 d) * M + tol * (1 + |ref| + M))
// with d the largest d_i of the case (P's relative error from its scores).
//
// Without a GPU every test that needs one skips with the reason; the argument
// checks still run. Inputs come from Philox (seed 20240607, or
// LADDER_GPU_TEST_SEED), so a failure reproduces.
#include "src/backend/cuda/attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention_tc.h"
#include "src/backend/cpu/cpu_backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::Bf16Rounded;
using gpu_test::ExpectBitwise;
using gpu_test::GpuFloats;
using gpu_test::GpuStored;
using gpu_test::kBf16Rounding;
using gpu_test::Normal;
using gpu_test::Poison;

constexpr double kOutTol = 2e-5;
constexpr double kGradTol = 1e-4;

// |got - want| <= tol * (1 + |want|) for a value stored in f32 and
// r * |want| + (1 + r) * tol * (1 + |want|), r = kBf16Rounding, for one
// rounded to bf16 on store (see the tolerances above).
void ExpectClose(const std::string& what, const std::vector<float>& got,
                 const std::vector<float>& want, double tol, DType stored = DType::kF32) {
  const double r = stored == DType::kBF16 ? kBf16Rounding : 0.0;
  gpu_test::ExpectClose(what, got, want, /*rel_tol=*/r + (1 + r) * tol, /*abs_tol=*/(1 + r) * tol);
}

struct Case {
  int64_t B, T, NH, HS;
  AttentionKind kind;
  float stddev;               // of q, k, v: larger values make peakier softmax rows
  DType dtype = DType::kF32;  // storage of qkv, out, dout, dqkv
};

const char* StorageName(DType t) { return t == DType::kBF16 ? "bf16" : "f32"; }

// True iff the case runs on the tensor-core kernels, forward and backward
// (the device buffers are aligned, so the dispatcher's choice is the head
// size's).
bool TensorCore(const Case& c) {
  return c.kind == AttentionKind::kFlash && c.dtype == DType::kBF16 &&
         kernels::FlashAttentionTcHeadSize(static_cast<int>(c.HS));
}

// The per-element bounds of the tensor-core forward (see the tolerances at
// the top) for out [B,T,C] and lse [B,NH,T], from the reference's qkv (the
// bf16-rounded values), out and lse.
void TensorCoreBounds(const Case& c, const std::vector<float>& qkv,
                      const std::vector<float>& out_ref, const std::vector<float>& lse_ref,
                      std::vector<double>* out_bound, std::vector<double>* lse_bound) {
  const int64_t T = c.T, NH = c.NH, HS = c.HS, C = NH * HS;
  const double r = kBf16Rounding, tol = kOutTol;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  out_bound->assign(out_ref.size(), 0.0);
  lse_bound->assign(lse_ref.size(), 0.0);
  std::vector<double> p(T), a(HS);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      auto at = [&](int64_t t, int64_t part, int64_t ch) {
        return static_cast<double>(qkv[(b * T + t) * 3 * C + part * C + h * HS + ch]);
      };
      for (int64_t i = 0; i < T; ++i) {
        const int64_t row = (b * NH + h) * T + i;
        double d = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0.0, mag = 0.0;
          for (int64_t ch = 0; ch < HS; ++ch) {
            s += at(i, 0, ch) * at(j, 1, ch);
            mag += std::fabs(at(i, 0, ch) * at(j, 1, ch));
          }
          p[j] = std::exp(s * scale - lse_ref[row]);
          d = std::max(d, static_cast<double>(HS) * 0x1p-24 * scale * mag);
        }
        (*lse_bound)[row] = tol * (1 + std::fabs(lse_ref[row])) + d;
        std::fill(a.begin(), a.end(), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t ch = 0; ch < HS; ++ch) a[ch] += p[j] * std::fabs(at(j, 2, ch));
        }
        for (int64_t ch = 0; ch < HS; ++ch) {
          const int64_t idx = (b * T + i) * C + h * HS + ch;
          const double ref = std::fabs(out_ref[idx]);
          (*out_bound)[idx] = r * ref + (1 + r) * ((r + 4 * d) * a[ch] + tol * (1 + ref + a[ch]));
        }
      }
    }
  }
}

// The per-element bounds of the tensor-core backward for dqkv [B,T,3C]
// (see the tolerances at the top), from the values both backwards read:
// qkv, dout and out as stored, and lse. In double: P[i,j] = exp(s_ij -
// lse_i), dS[i,j] = P[i,j] (dO_i . v_j - dO_i . O_i) and the magnitude sums
// Mv[j,c] = sum_i P[i,j] |dO[i,c]|, Mk[j,c] = scale sum_i |dS[i,j]| |q_i[c]|,
// Mq[i,c] = scale sum_j |dS[i,j]| |k_j[c]|.
void TensorCoreGradBounds(const Case& c, const std::vector<float>& qkv,
                          const std::vector<float>& dout, const std::vector<float>& out,
                          const std::vector<float>& lse, const std::vector<float>& dqkv_ref,
                          std::vector<double>* bound) {
  const int64_t T = c.T, NH = c.NH, HS = c.HS, C = NH * HS;
  const double r = kBf16Rounding, tol = kGradTol;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> mag(dqkv_ref.size(), 0.0), d(static_cast<size_t>(c.B * T), 0.0);
  std::vector<double> P(T * T), dS(T * T);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      auto at = [&](int64_t t, int64_t part, int64_t ch) {
        return static_cast<double>(qkv[(b * T + t) * 3 * C + part * C + h * HS + ch]);
      };
      auto row = [&](const std::vector<float>& x, int64_t t, int64_t ch) {
        return static_cast<double>(x[(b * T + t) * C + h * HS + ch]);
      };
      for (int64_t i = 0; i < T; ++i) {
        double D = 0.0;
        for (int64_t ch = 0; ch < HS; ++ch) D += row(dout, i, ch) * row(out, i, ch);
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0.0, m = 0.0, dp = 0.0;
          for (int64_t ch = 0; ch < HS; ++ch) {
            s += at(i, 0, ch) * at(j, 1, ch);
            m += std::fabs(at(i, 0, ch) * at(j, 1, ch));
            dp += row(dout, i, ch) * at(j, 2, ch);
          }
          P[i * T + j] = std::exp(s * scale - lse[(b * NH + h) * T + i]);
          dS[i * T + j] = P[i * T + j] * (dp - D);
          d[b * T + i] = std::max(d[b * T + i], static_cast<double>(HS) * 0x1p-24 * scale * m);
        }
      }
      for (int64_t i = 0; i < T; ++i) {
        for (int64_t j = 0; j <= i; ++j) {
          const double p = P[i * T + j], ds = std::fabs(dS[i * T + j]) * scale;
          for (int64_t ch = 0; ch < HS; ++ch) {
            mag[(b * T + i) * 3 * C + h * HS + ch] += ds * std::fabs(at(j, 1, ch));
            mag[(b * T + j) * 3 * C + C + h * HS + ch] += ds * std::fabs(at(i, 0, ch));
            mag[(b * T + j) * 3 * C + 2 * C + h * HS + ch] += p * std::fabs(row(dout, i, ch));
          }
        }
      }
    }
  }
  // Each term's relative error: r from rounding P or dS to bf16, 4 d_i from
  // P's scores (as in the forward; the worst row of the batch bounds all).
  const double dmax = *std::max_element(d.begin(), d.end());
  bound->resize(dqkv_ref.size());
  for (size_t k = 0; k < dqkv_ref.size(); ++k) {
    const double ref = std::fabs(dqkv_ref[k]);
    (*bound)[k] = r * ref + (1 + r) * ((r + 4 * dmax) * mag[k] + tol * (1 + ref + mag[k]));
  }
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.kind == AttentionKind::kFlash ? "flash" : "naive") << " " << StorageName(c.dtype)
      << " B=" << c.B << " T=" << c.T << " NH=" << c.NH << " HS=" << c.HS << " stddev=" << c.stddev
      << (TensorCore(c) ? " (tensor-core kernels)" : "");
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.kind == AttentionKind::kFlash ? "flash" : "naive",
                      c.dtype == DType::kBF16 ? "_bf16" : "", "_B", c.B, "_T", c.T, "_NH", c.NH,
                      "_HS", c.HS, c.stddev > 1.0f ? "_peaky" : "", TensorCore(c) ? "_tc" : "");
}

class AttentionGpuTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_P(AttentionGpuTest, MatchesCpu) {
  const Case c = GetParam();
  const int64_t B = c.B, T = c.T, NH = c.NH, C = c.NH * c.HS;
  const int nh = static_cast<int>(NH);
  const DType dt = c.dtype;
  const bool bf16 = dt == DType::kBF16;
  const uint64_t s = static_cast<uint64_t>(((B * 131 + T) * 17 + NH) * 257 + c.HS) * 4;
  // bf16: the values the kernels will load, so the reference sees them too.
  auto stored = [&](std::vector<float> x) { return bf16 ? Bf16Rounded(std::move(x)) : x; };
  const std::vector<float> qkv = stored(Normal(B * T * 3 * C, s + 0, 0.0f, c.stddev));
  const std::vector<float> dout = stored(Normal(B * T * C, s + 1));
  const int64_t scratch_n = AttentionScratchFloats(c.kind, B, T, NH);

  // ---- CPU reference forward ----
  CpuBackend cpu;
  const Device kCpu = Device::kCpu;
  std::vector<float> qkv_c = qkv, dout_c = dout, out_c(B * T * C), lse_c(B * NH * T),
                     dqkv_c(B * T * 3 * C), scratch_c(scratch_n);
  const Tensor cpu_scratch =
      scratch_n > 0 ? Tensor::F32(scratch_c.data(), {scratch_n}, kCpu) : Tensor();
  ASSERT_TRUE(cpu.AttentionForward(Tensor::F32(out_c.data(), {B, T, C}, kCpu),
                                   Tensor::F32(lse_c.data(), {B, NH, T}, kCpu),
                                   Tensor::F32(qkv_c.data(), {B, T, 3 * C}, kCpu), nh, c.kind,
                                   cpu_scratch)
                  .ok());

  // ---- GPU forward ----
  GpuStored qkv_g(qkv, dt), out_g(Poison(B * T * C), dt), dout_g(dout, dt),
      dqkv_g(Poison(B * T * 3 * C), dt);
  GpuFloats lse_g(B * NH * T), scratch_g(scratch_n);
  for (const GpuStored* b : {&qkv_g, &out_g, &dout_g, &dqkv_g}) {
    ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  }
  for (const GpuFloats* b : {&lse_g, &scratch_g}) ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  const Tensor gpu_scratch = scratch_n > 0 ? scratch_g.View({scratch_n}) : Tensor();
  auto forward = [&]() {
    out_g.Upload(Poison(B * T * C));
    lse_g.Upload(Poison(B * NH * T));
    scratch_g.Upload(Poison(scratch_n));
    return cuda::AttentionForward(out_g.View({B, T, C}), lse_g.View({B, NH, T}),
                                  qkv_g.View({B, T, 3 * C}), nh, c.kind, gpu_scratch);
  };
  absl::Status st = forward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = out_g.Download(), lse = lse_g.Download();
  if (TensorCore(c)) {
    std::vector<double> out_bound, lse_bound;
    TensorCoreBounds(c, qkv, out_c, lse_c, &out_bound, &lse_bound);
    gpu_test::ExpectWithin("out", out, out_c, out_bound);
    gpu_test::ExpectWithin("lse", lse, lse_c, lse_bound);
  } else {
    ExpectClose("out", out, out_c, kOutTol, dt);
    ExpectClose("lse", lse, lse_c, kOutTol);  // f32 whatever the storage
  }

  // ---- CPU reference backward, on the out and lse the GPU backward reads ----
  // f32: the reference's own. bf16: the ones the GPU forward produced.
  std::vector<float> out_bwd = bf16 ? out : out_c, lse_bwd = bf16 ? lse : lse_c;
  ASSERT_TRUE(cpu.AttentionBackward(Tensor::F32(dqkv_c.data(), {B, T, 3 * C}, kCpu),
                                    Tensor::F32(dout_c.data(), {B, T, C}, kCpu),
                                    Tensor::F32(qkv_c.data(), {B, T, 3 * C}, kCpu),
                                    Tensor::F32(out_bwd.data(), {B, T, C}, kCpu),
                                    Tensor::F32(lse_bwd.data(), {B, NH, T}, kCpu), nh, c.kind,
                                    cpu_scratch)
                  .ok());

  // ---- GPU backward, on the same out and lse ----
  GpuStored out_ref(out_bwd, dt);  // exact: out_bwd holds values of dtype dt
  GpuFloats lse_ref(lse_bwd);
  ASSERT_TRUE(out_ref.ok() && lse_ref.ok()) << "cudaMalloc failed";
  auto backward = [&]() {
    dqkv_g.Upload(Poison(B * T * 3 * C));
    scratch_g.Upload(Poison(scratch_n));
    return cuda::AttentionBackward(dqkv_g.View({B, T, 3 * C}), dout_g.View({B, T, C}),
                                   qkv_g.View({B, T, 3 * C}), out_ref.View({B, T, C}),
                                   lse_ref.View({B, NH, T}), nh, c.kind, gpu_scratch);
  };
  st = backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> dqkv = dqkv_g.Download();
  std::vector<double> grad_bound;
  if (TensorCore(c)) TensorCoreGradBounds(c, qkv, dout, out_bwd, lse_bwd, dqkv_c, &grad_bound);
  // dq, dk, dv separately, so a failure names the part.
  const char* part_name[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    std::vector<float> got, want;
    std::vector<double> bound;
    for (int64_t bt = 0; bt < B * T; ++bt) {
      for (int64_t ch = 0; ch < C; ++ch) {
        const int64_t k = bt * 3 * C + part * C + ch;
        got.push_back(dqkv[k]);
        want.push_back(dqkv_c[k]);
        if (TensorCore(c)) bound.push_back(grad_bound[k]);
      }
    }
    if (TensorCore(c)) {
      gpu_test::ExpectWithin(part_name[part], got, want, bound);
    } else {
      ExpectClose(part_name[part], got, want, kGradTol, dt);
    }
  }

  // ---- determinism: the same bits again ----
  st = forward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("out, second run", out_g.Download(), out);
  ExpectBitwise("lse, second run", lse_g.Download(), lse);
  st = backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("dqkv, second run", dqkv_g.Download(), dqkv);
}

// GPT-2's head size (64) and its neighbours; 24 and 48 (not multiples of
// 32: a lane's last column chunk is partial), 25 (odd), 128 (the flash
// kernels' shared memory above the default 48 KiB), 256 (their limit, ~205
// KiB). T = 1 (a single key), T < 32, T = 64 (whole tiles) and T = 33, 70,
// 97, 161 (a partial last tile). The naive kind is O(T^2) per thread group,
// so it gets fewer, smaller cases. Every case runs for both storage dtypes.
std::vector<Case> Cases() {
  constexpr AttentionKind kF = AttentionKind::kFlash;
  constexpr AttentionKind kN = AttentionKind::kNaive;
  const std::vector<Case> shapes = {
      {1, 1, 1, 32, kF, 1.0f},   {2, 70, 2, 32, kF, 1.0f},  {1, 33, 1, 64, kF, 1.0f},
      {2, 64, 3, 64, kF, 1.0f},  {3, 17, 3, 24, kF, 1.0f},  {1, 97, 2, 48, kF, 1.0f},
      {2, 40, 2, 25, kF, 1.0f},  {1, 45, 2, 128, kF, 1.0f}, {1, 70, 2, 32, kF, 3.0f},
      {2, 161, 2, 64, kF, 1.0f}, {1, 35, 1, 256, kF, 1.0f}, {1, 1, 1, 32, kN, 1.0f},
      {2, 37, 2, 32, kN, 1.0f},  {1, 33, 3, 24, kN, 1.0f},  {1, 20, 1, 25, kN, 3.0f},
  };
  std::vector<Case> cases;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (Case c : shapes) {
      c.dtype = dtype;
      cases.push_back(c);
    }
  }
  // The tensor-core forward (bf16, HS 64 and 128): 64-row tiles, so T = 1,
  // 17 (one partial tile), 64 (one whole), 65 (one row into a second), 130
  // (a partial third), 256 (four whole); and one peaky case (softmax rows
  // dominated by a few keys, the running max rising from tile to tile).
  const std::vector<Case> tc_shapes = {
      {1, 1, 1, 64, kF, 1.0f},   {2, 17, 3, 64, kF, 1.0f},   {1, 64, 2, 64, kF, 1.0f},
      {2, 65, 1, 64, kF, 1.0f},  {1, 130, 3, 64, kF, 1.0f},  {2, 256, 2, 64, kF, 1.0f},
      {2, 1, 2, 128, kF, 1.0f},  {1, 17, 1, 128, kF, 1.0f},  {2, 64, 1, 128, kF, 1.0f},
      {1, 65, 3, 128, kF, 1.0f}, {2, 130, 1, 128, kF, 1.0f}, {1, 256, 2, 128, kF, 1.0f},
      {1, 130, 2, 64, kF, 3.0f},
  };
  for (Case c : tc_shapes) {
    c.dtype = DType::kBF16;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionGpuTest, testing::ValuesIn(Cases()), CaseName);

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(AttentionGpuArgs, RejectsBadArguments) {
  float fake[4];  // never dereferenced: every call below fails validation
  auto gpu = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kF32, dims, Device::kCuda);
  };
  constexpr AttentionKind kF = AttentionKind::kFlash;
  constexpr AttentionKind kN = AttentionKind::kNaive;

  absl::Status s =
      cuda::AttentionForward(gpu({2, 5, 64}), gpu({2, 2, 5}),
                             Tensor::F32(fake, {2, 5, 192}, Device::kCpu), 2, kF, Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a CUDA tensor"), std::string::npos) << s;

  s = cuda::AttentionForward(gpu({2, 5, 64}), gpu({2, 3, 5}), gpu({2, 5, 192}), 3, kF, Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "3 heads do not divide C=64";

  s = cuda::AttentionForward(gpu({2, 5, 64}), gpu({2, 2, 4}), gpu({2, 5, 192}), 2, kF, Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "lse of the wrong shape";

  s = cuda::AttentionForward(gpu({2, 5, 64}), gpu({2, 2, 5}), gpu({2, 5, 192}), 2, kN,
                             gpu({2 * 2 * 5 * 5 - 1}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "naive scratch too small";
  EXPECT_NE(s.message().find("scratch"), std::string::npos) << s;

  s = cuda::AttentionForward(gpu({1, 5, 512}), gpu({1, 1, 5}), gpu({1, 5, 1536}), 1, kF, Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "flash head size 512";
  EXPECT_NE(s.message().find("head size"), std::string::npos) << s;

  s = cuda::AttentionBackward(gpu({2, 5, 192}), gpu({2, 5, 64}), gpu({2, 5, 192}), gpu({2, 4, 64}),
                              gpu({2, 2, 5}), 2, kF, Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "out of the wrong shape";

  // One storage dtype per call (qkv's); lse and scratch f32 whatever it is.
  auto b16 = [&](std::initializer_list<int64_t> dims) {
    return Tensor(fake, DType::kBF16, dims, Device::kCuda);
  };
  for (AttentionKind kind : {kF, kN}) {
    const Tensor scratch = kind == kN ? gpu({2 * 2 * 5 * 5}) : Tensor();
    s = cuda::AttentionForward(gpu({2, 5, 64}), gpu({2, 2, 5}), b16({2, 5, 192}), 2, kind, scratch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "f32 out, bf16 qkv";
    EXPECT_NE(s.message().find("out is f32 but qkv is bf16"), std::string::npos) << s;

    s = cuda::AttentionForward(b16({2, 5, 64}), gpu({2, 2, 5}), gpu({2, 5, 192}), 2, kind, scratch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 out, f32 qkv";
    EXPECT_NE(s.message().find("out is bf16 but qkv is f32"), std::string::npos) << s;

    s = cuda::AttentionForward(b16({2, 5, 64}), b16({2, 2, 5}), b16({2, 5, 192}), 2, kind, scratch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 lse";
    EXPECT_NE(s.message().find("lse"), std::string::npos) << s;

    s = cuda::AttentionBackward(b16({2, 5, 192}), gpu({2, 5, 64}), b16({2, 5, 192}),
                                b16({2, 5, 64}), gpu({2, 2, 5}), 2, kind, scratch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "f32 dout, bf16 qkv";
    EXPECT_NE(s.message().find("dout is f32 but qkv is bf16"), std::string::npos) << s;

    s = cuda::AttentionBackward(b16({2, 5, 192}), b16({2, 5, 64}), b16({2, 5, 192}),
                                gpu({2, 5, 64}), gpu({2, 2, 5}), 2, kind, scratch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "f32 out, bf16 qkv";
    EXPECT_NE(s.message().find("out is f32 but qkv is bf16"), std::string::npos) << s;

    s = cuda::AttentionBackward(gpu({2, 5, 192}), b16({2, 5, 64}), b16({2, 5, 192}),
                                b16({2, 5, 64}), gpu({2, 2, 5}), 2, kind, scratch);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "f32 dqkv, bf16 qkv";
    EXPECT_NE(s.message().find("dqkv is f32 but qkv is bf16"), std::string::npos) << s;
  }
  s = cuda::AttentionForward(b16({2, 5, 64}), gpu({2, 2, 5}), b16({2, 5, 192}), 2, kN,
                             b16({2 * 2 * 5 * 5}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 scratch";
  EXPECT_NE(s.message().find("scratch"), std::string::npos) << s;

  s = cuda::AttentionForward(gpu({2, 5, 64}), gpu({2, 2, 5}),
                             Tensor(fake, DType::kI32, {2, 5, 192}, Device::kCuda), 2, kF,
                             Tensor());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "i32 qkv";
  EXPECT_NE(s.message().find("f32 or bf16"), std::string::npos) << s;
}

}  // namespace
}  // namespace ladder
