// The CUDA kernels of attention by positions (kernels/attention_part.cu,
// context parallelism's ring steps) against the CPU reference (CpuBackend),
// in f32 and bf16 storage. The blocks are those a ring of ranks meets (a
// rank holds chunks r and 2R-1-r of each sequence: its own block, with both
// gradients in one tensor, and the other ranks' blocks, where whole query
// chunks see no key) and unsorted, repeated random positions; head sizes 25
// (odd), 64, 128 (shared memory above 48 KiB) and 256 (the limit); a single
// key; lengths never a multiple of the 32-row tile. The forward runs with
// merge false (outputs poisoned with NaN) and merge true (into a random
// partial result, some rows of it -inf); the backward adds into random
// gradients. Then bitwise run-to-run determinism, and the argument checks
// (which run without a GPU too).
//
// Storage and tolerances as tests/gpu/attention_test.cc: for bf16 the
// reference is the fp32 CPU backend on the bf16-rounded inputs (q_qkv,
// kv_qkv, dout, the partial out and the gradients added into), and both
// backwards read the out and lse of the GPU forward. Per element, with ref
// the CPU value, tol = 2e-5 for out and lse and 1e-4 for the gradients, and
// r = 2^-8 for a value rounded to bf16 on store:
//   f32 (and lse):  |gpu - ref| <= tol * (1 + |ref|)
//   bf16:           |gpu - ref| <= r * |ref| + (1 + r) * tol * (1 + |ref|)
// An lse of -inf (a query that sees no key) must be -inf on both sides.
#include "src/backend/cuda/attention_part.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "tests/gpu/gpu_test_util.h"

namespace ladder {
namespace {

using gpu_test::Bf16Rounded;
using gpu_test::ExpectBitwise;
using gpu_test::GpuFloats;
using gpu_test::GpuInts;
using gpu_test::GpuStored;
using gpu_test::kBf16Rounding;
using gpu_test::Normal;
using gpu_test::Poison;

constexpr double kOutTol = 2e-5;
constexpr double kGradTol = 1e-4;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The bounds above; -inf where ref is -inf (compared by value, elsewhere).
void ExpectClose(const std::string& what, const std::vector<float>& got,
                 const std::vector<float>& want, double tol, DType stored = DType::kF32) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::vector<float> got_finite, want_finite;
  int inf_mismatch = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      inf_mismatch += got[i] != want[i];
      continue;
    }
    got_finite.push_back(got[i]);
    want_finite.push_back(want[i]);
  }
  EXPECT_EQ(inf_mismatch, 0) << what << ": infinities differ";
  const double r = stored == DType::kBF16 ? kBf16Rounding : 0.0;
  gpu_test::ExpectClose(what, got_finite, want_finite, r + (1 + r) * tol, (1 + r) * tol);
}

// Rank r's positions in a ring of R ranks, chunks of c tokens: r*c .. and
// (2R-1-r)*c ...
std::vector<int32_t> RankPositions(int R, int c, int r) {
  std::vector<int32_t> p;
  for (int chunk : {r, 2 * R - 1 - r}) {
    for (int i = 0; i < c; ++i) p.push_back(chunk * c + i);
  }
  return p;
}

struct Case {
  std::string name;
  int64_t B, NH, HS;
  std::vector<int32_t> q_pos, k_pos;
  bool merge;
  bool own;  // q_qkv and kv_qkv one tensor, and so are the two gradients
  DType dtype = DType::kF32;
  int64_t Tq() const { return static_cast<int64_t>(q_pos.size()); }
  int64_t Tk() const { return static_cast<int64_t>(k_pos.size()); }
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << (c.dtype == DType::kBF16 ? " bf16" : " f32") << " B=" << c.B << " Tq=" << c.Tq()
      << " Tk=" << c.Tk() << " NH=" << c.NH << " HS=" << c.HS << (c.merge ? " merge" : "");
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  return absl::StrCat(info.param.name, info.param.dtype == DType::kBF16 ? "_bf16" : "");
}

class AttentionPartGpuTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu_test::NoGpu(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_P(AttentionPartGpuTest, MatchesCpu) {
  const Case c = GetParam();
  const int64_t B = c.B, Tq = c.Tq(), Tk = c.Tk(), NH = c.NH, C = c.NH * c.HS;
  const int nh = static_cast<int>(NH);
  const DType dt = c.dtype;
  const bool bf16 = dt == DType::kBF16;
  const uint64_t s = static_cast<uint64_t>(((B * 131 + Tq) * 17 + Tk) * 257 + C) * 8;
  auto stored = [&](std::vector<float> x) { return bf16 ? Bf16Rounded(std::move(x)) : x; };
  const std::vector<float> q_qkv = stored(Normal(B * Tq * 3 * C, s + 0));
  const std::vector<float> kv_qkv = c.own ? q_qkv : stored(Normal(B * Tk * 3 * C, s + 1));
  const std::vector<float> dout = stored(Normal(B * Tq * C, s + 2));
  // The partial result a merge starts from: every fifth row saw no key yet.
  const std::vector<float> out1 = c.merge ? stored(Normal(B * Tq * C, s + 3)) : Poison(B * Tq * C);
  std::vector<float> lse1 = c.merge ? Normal(B * NH * Tq, s + 4, 2.0f) : Poison(B * NH * Tq);
  if (c.merge) {
    for (size_t i = 0; i < lse1.size(); i += 5) lse1[i] = kNegInf;
  }
  const std::vector<float> dq0 = stored(Normal(B * Tq * 3 * C, s + 5));
  const std::vector<float> dkv0 = c.own ? dq0 : stored(Normal(B * Tk * 3 * C, s + 6));

  // ---- CPU reference forward ----
  CpuBackend cpu;
  const Device kCpu = Device::kCpu;
  std::vector<float> q_c = q_qkv, kv_c = kv_qkv, out_c = out1, lse_c = lse1;
  std::vector<int32_t> qp_c = c.q_pos, kp_c = c.k_pos;
  const Tensor q_ct = Tensor::F32(q_c.data(), {B, Tq, 3 * C}, kCpu);
  const Tensor kv_ct = c.own ? q_ct : Tensor::F32(kv_c.data(), {B, Tk, 3 * C}, kCpu);
  const Tensor qp_ct = Tensor::I32(qp_c.data(), {Tq}, kCpu);
  const Tensor kp_ct = c.own ? qp_ct : Tensor::I32(kp_c.data(), {Tk}, kCpu);
  ASSERT_TRUE(cpu.AttentionPartForward(Tensor::F32(out_c.data(), {B, Tq, C}, kCpu),
                                       Tensor::F32(lse_c.data(), {B, NH, Tq}, kCpu), q_ct, kv_ct,
                                       qp_ct, kp_ct, nh, c.merge)
                  .ok());

  // ---- GPU forward ----
  GpuStored q_g(q_qkv, dt), kv_g(kv_qkv, dt), out_g(out1, dt), dout_g(dout, dt);
  GpuStored dq_g(dq0, dt), dkv_g(dkv0, dt);
  GpuFloats lse_g(lse1);
  GpuInts qp_g(c.q_pos), kp_g(c.k_pos);
  for (const GpuStored* b : {&q_g, &kv_g, &out_g, &dout_g, &dq_g, &dkv_g}) {
    ASSERT_TRUE(b->ok()) << "cudaMalloc failed";
  }
  ASSERT_TRUE(lse_g.ok() && qp_g.ok() && kp_g.ok()) << "cudaMalloc failed";
  const Tensor q_t = q_g.View({B, Tq, 3 * C}), kv_t = c.own ? q_t : kv_g.View({B, Tk, 3 * C});
  const Tensor qp_t = qp_g.View({Tq}), kp_t = c.own ? qp_t : kp_g.View({Tk});
  auto forward = [&]() {
    out_g.Upload(out1);
    lse_g.Upload(lse1);
    return cuda::AttentionPartForward(out_g.View({B, Tq, C}), lse_g.View({B, NH, Tq}), q_t, kv_t,
                                      qp_t, kp_t, nh, c.merge);
  };
  absl::Status st = forward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = out_g.Download(), lse = lse_g.Download();
  ExpectClose("out", out, out_c, kOutTol, dt);
  ExpectClose("lse", lse, lse_c, kOutTol);

  // ---- backward, both on the out and lse of one forward ----
  // f32: the reference's. bf16: the GPU's (as in training).
  std::vector<float> out_b = bf16 ? out : out_c, lse_b = bf16 ? lse : lse_c;
  std::vector<float> dq_c = dq0, dkv_c = dkv0, dout_c = dout;
  const Tensor dq_ct = Tensor::F32(dq_c.data(), {B, Tq, 3 * C}, kCpu);
  const Tensor dkv_ct = c.own ? dq_ct : Tensor::F32(dkv_c.data(), {B, Tk, 3 * C}, kCpu);
  ASSERT_TRUE(cpu.AttentionPartBackward(dq_ct, dkv_ct, Tensor::F32(dout_c.data(), {B, Tq, C}, kCpu),
                                        q_ct, kv_ct, Tensor::F32(out_b.data(), {B, Tq, C}, kCpu),
                                        Tensor::F32(lse_b.data(), {B, NH, Tq}, kCpu), qp_ct, kp_ct,
                                        nh)
                  .ok());
  GpuStored out_ref(out_b, dt);  // exact: out_b holds values of dtype dt
  GpuFloats lse_ref(lse_b);
  ASSERT_TRUE(out_ref.ok() && lse_ref.ok()) << "cudaMalloc failed";
  const Tensor dq_t = dq_g.View({B, Tq, 3 * C}), dkv_t = c.own ? dq_t : dkv_g.View({B, Tk, 3 * C});
  auto backward = [&]() {
    dq_g.Upload(dq0);
    if (!c.own) dkv_g.Upload(dkv0);
    return cuda::AttentionPartBackward(dq_t, dkv_t, dout_g.View({B, Tq, C}), q_t, kv_t,
                                       out_ref.View({B, Tq, C}), lse_ref.View({B, NH, Tq}), qp_t,
                                       kp_t, nh);
  };
  st = backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> dq = dq_g.Download(), dkv = c.own ? dq : dkv_g.Download();
  ExpectClose("dq_qkv", dq, dq_c, kGradTol, dt);
  if (!c.own) ExpectClose("dkv_qkv", dkv, dkv_c, kGradTol, dt);

  // ---- determinism: the same bits again ----
  st = forward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("out, second run", out_g.Download(), out);
  ExpectBitwise("lse, second run", lse_g.Download(), lse);
  st = backward();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("dq_qkv, second run", dq_g.Download(), dq);
  if (!c.own) ExpectBitwise("dkv_qkv, second run", dkv_g.Download(), dkv);
}

std::vector<Case> Cases() {
  const std::vector<int32_t> random_q = gpu_test::UniformInts(45, 900, 0, 90),
                             random_k = gpu_test::UniformInts(70, 901, 0, 90);
  std::vector<int32_t> one_key = {20}, long_q(150), long_k(170);
  for (int i = 0; i < 150; ++i) long_q[i] = 30 + i;
  for (int i = 0; i < 170; ++i) long_k[i] = i;
  const std::vector<Case> shapes = {
      // A ring of 2 ranks, chunks of 37: rank 1's own block, rank 0's block
      // at rank 1 (all allowed), rank 1's block at rank 0 (the early chunk
      // sees nothing, the late one everything).
      {"ring_own", 2, 2, 64, RankPositions(2, 37, 1), RankPositions(2, 37, 1), false, true},
      {"ring_other", 2, 2, 64, RankPositions(2, 37, 1), RankPositions(2, 37, 0), true, false},
      {"ring_later", 2, 2, 64, RankPositions(2, 37, 0), RankPositions(2, 37, 1), true, false},
      // A ring of 4 ranks, chunks of 7, wide heads (over 48 KiB of shared memory).
      {"ring4_own_hs128", 1, 2, 128, RankPositions(4, 7, 2), RankPositions(4, 7, 2), false, true},
      {"ring4_other_hs128", 1, 2, 128, RankPositions(4, 7, 2), RankPositions(4, 7, 3), true, false},
      {"random_hs25", 2, 3, 25, random_q, random_k, true, false},
      {"long", 1, 2, 32, long_q, long_k, false, false},
      {"one_key", 2, 1, 64, long_q, one_key, true, false},
      {"hs256", 1, 1, 256, RankPositions(2, 11, 0), RankPositions(2, 11, 1), true, false},
  };
  std::vector<Case> cases;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (Case c : shapes) {
      c.dtype = dtype;
      cases.push_back(c);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Blocks, AttentionPartGpuTest, testing::ValuesIn(Cases()), CaseName);

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(AttentionPartGpuArgs, RejectsBadArguments) {
  float fake[4];  // never dereferenced: every call below fails validation
  auto t = [&](DType dtype, std::initializer_list<int64_t> dims) {
    return Tensor(fake, dtype, dims, Device::kCuda);
  };
  const DType f32 = DType::kF32, b16 = DType::kBF16, i32 = DType::kI32;
  const Tensor qp = t(i32, {5}), kp = t(i32, {6});
  auto expect = [](const absl::Status& s, const std::string& text) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(text), std::string::npos) << s;
  };

  expect(cuda::AttentionPartForward(t(f32, {2, 5, 64}), t(f32, {2, 2, 5}),
                                    Tensor::F32(fake, {2, 5, 192}, Device::kCpu),
                                    t(f32, {2, 6, 192}), qp, kp, 2, false),
         "not a CUDA tensor");
  expect(cuda::AttentionPartForward(t(f32, {2, 5, 64}), t(f32, {2, 2, 5}), t(f32, {2, 5, 192}),
                                    t(b16, {2, 6, 192}), qp, kp, 2, false),
         "kv_qkv is bf16 but q_qkv is f32");
  expect(cuda::AttentionPartForward(t(f32, {2, 5, 64}), t(f32, {2, 2, 5}), t(b16, {2, 5, 192}),
                                    t(b16, {2, 6, 192}), qp, kp, 2, true),
         "out is f32 but q_qkv is bf16");
  expect(cuda::AttentionPartForward(t(b16, {2, 5, 64}), t(b16, {2, 2, 5}), t(b16, {2, 5, 192}),
                                    t(b16, {2, 6, 192}), qp, kp, 2, true),
         "lse");
  expect(cuda::AttentionPartForward(t(f32, {2, 5, 64}), t(f32, {2, 2, 5}), t(f32, {2, 5, 192}),
                                    t(f32, {2, 6, 192}), t(f32, {5}), kp, 2, false),
         "q_pos");
  expect(cuda::AttentionPartForward(t(f32, {2, 5, 64}), t(f32, {2, 2, 5}), t(f32, {2, 5, 192}),
                                    t(f32, {2, 6, 192}), qp, t(i32, {5}), 2, false),
         "k_pos");
  expect(cuda::AttentionPartForward(t(f32, {1, 5, 512}), t(f32, {1, 1, 5}), t(f32, {1, 5, 1536}),
                                    t(f32, {1, 6, 1536}), qp, kp, 1, false),
         "head size");
  expect(cuda::AttentionPartForward(t(f32, {2, 5, 64}), t(f32, {2, 2, 5}), t(i32, {2, 5, 192}),
                                    t(i32, {2, 6, 192}), qp, kp, 2, false),
         "f32 or bf16");

  const Tensor q16 = t(b16, {2, 5, 192}), kv16 = t(b16, {2, 6, 192}), o16 = t(b16, {2, 5, 64}),
               lse = t(f32, {2, 2, 5});
  expect(cuda::AttentionPartBackward(t(b16, {2, 5, 192}), t(f32, {2, 6, 192}), o16, q16, kv16, o16,
                                     lse, qp, kp, 2),
         "dkv_qkv is f32 but q_qkv is bf16");
  expect(cuda::AttentionPartBackward(t(f32, {2, 5, 192}), t(b16, {2, 6, 192}), o16, q16, kv16, o16,
                                     lse, qp, kp, 2),
         "dq_qkv is f32 but q_qkv is bf16");
  expect(cuda::AttentionPartBackward(t(b16, {2, 5, 192}), t(b16, {2, 6, 192}), t(f32, {2, 5, 64}),
                                     q16, kv16, o16, lse, qp, kp, 2),
         "dout is f32 but q_qkv is bf16");
  expect(cuda::AttentionPartBackward(t(b16, {2, 5, 192}), t(b16, {2, 6, 192}), o16, q16, kv16, o16,
                                     t(b16, {2, 2, 5}), qp, kp, 2),
         "lse");
}

}  // namespace
}  // namespace ladder
