// The CUDA vocabulary-parallel cross-entropy (kernels/cross_entropy.cu)
// against the CPU reference (CpuBackend), step by step: each GPU step gets
// the CPU's outputs of the previous step as inputs, so every comparison
// measures one kernel. Cases: whole vocabularies (padded and not), a middle
// shard, a last shard that is partly padding, a shard of padding only
// (-FLT_MAX max, zero sum), one row, one column, widths not a multiple of 4
// (scalar kernels), GPT-2's 50257 of 50304, misaligned views; outputs
// poisoned with NaN first. The backward runs out of place and in place
// (dlogits aliasing logits); both must give the same bits, and padded columns
// exactly 0.
//
// Storage: every case runs with f32 logits and with bf16 logits (then dlogits
// is bf16 too; backend.h "Precision"). For bf16 the logits are rounded to
// bf16 first (Bf16Rounded) and the fp32 CPU reference computes on those same
// values, so every f32 statistic keeps its f32 tolerance below; only dlogits
// gains one final rounding. Mixed-dtype calls are InvalidArgument.
//
// Tolerances, with ref the CPU value:
//   row_max, target_logit: bitwise (a max and a copy).
//   sum_exp: |gpu - ref| <= 1e-5 |ref|: positive terms, each exp within a few
//     ulp on both sides (CUDA expf vs the CPU's ExpF), summed in different
//     orders (relative error ~ eps * log2(V) at worst for a tree).
//   lse, losses: |gpu - ref| <= 1e-5 (1 + |ref|): logf vs std::log, a few ulp
//     of log(sum) (same inputs on both sides).
//   dlogits: |gpu - ref| <= (4e-6 + r16) |ref| + 1e-6 |dloss|: exp within a
//     few ulp; at the target, p*dloss - dloss cancels when p ~ 1, so a few ulp
//     of dloss absolute; r16 = kBf16Rounding = 2^-8 (one rounding to bf16) for
//     bf16 dlogits, 0 for f32.
// Determinism: RowMax, Partials and Backward run twice, compared bitwise.
// The fused classifier (CrossEntropyFused, whole vocabularies only) is held
// to the same tolerances as the steps, its padding columns exactly 0.
#include "src/backend/cuda/cross_entropy.h"

#include <algorithm>
#include <cfloat>
#include <cstdint>
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
using gpu_test::ExpectBitwise;
using gpu_test::ExpectClose;
using gpu_test::GpuFloats;
using gpu_test::GpuInts;
using gpu_test::GpuStored;
using gpu_test::kBf16Rounding;
using gpu_test::Normal;
using gpu_test::Poison;
using gpu_test::UniformInts;

constexpr double kSumRel = 1e-5;
constexpr double kLossTol = 1e-5;
constexpr double kGradRel = 4e-6;
constexpr double kGradAbsPerDloss = 1e-6;

struct Case {
  int64_t N;
  int V;                // real vocabulary
  int64_t vocab_start;  // the shard: columns [vocab_start, vocab_start + vshard)
  int64_t vshard;
  int64_t offset;             // element offset of the logits' GPU views (1: misaligned)
  DType dtype = DType::kF32;  // of logits and dlogits
};

// How gtest prints a failing case: its name.
std::string CaseName(const testing::TestParamInfo<Case>& info);
void PrintTo(const Case& c, std::ostream* os) {
  *os << CaseName(testing::TestParamInfo<Case>(c, 0));
}

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("N", c.N, "_V", c.V, "_shard", c.vocab_start, "_", c.vshard,
                      c.offset ? "_misaligned" : "", c.dtype == DType::kBF16 ? "_bf16" : "");
}

class CrossEntropyGpuTest : public gpu_test::GpuTest, public testing::WithParamInterface<Case> {};

TEST_P(CrossEntropyGpuTest, MatchesCpu) {
  const Case c = GetParam();
  const int64_t N = c.N, Vs = c.vshard, NV = N * Vs;
  const uint64_t s = static_cast<uint64_t>(N * 1009 + c.V * 3 + c.vocab_start) * 16;
  // Logits with a spread like a trained model's, plus a few confident rows
  // (a large target logit: p ~ 1, the cancelling case of the backward).
  std::vector<float> logits = Normal(NV, s, 0.0f, 3.0f);
  std::vector<int32_t> targets = UniformInts(N, s + 1, 0, c.V);
  for (int64_t n = 0; n < N; n += 3) {
    const int64_t j = targets[n] - c.vocab_start;
    if (j >= 0 && j < Vs) logits[n * Vs + j] = 30.0f;
  }
  const bool bf16 = c.dtype == DType::kBF16;
  if (bf16) logits = Bf16Rounded(std::move(logits));  // what the GPU stores (30 is exact)
  const double r16 = bf16 ? kBf16Rounding : 0.0;
  const float dloss = 1.0f / 3.0f;
  const int64_t real = std::clamp<int64_t>(c.V - c.vocab_start, 0, Vs);

  // ---- CPU reference ----
  CpuBackend cpu;
  std::vector<float> lg_c = logits, max_c(N), sum_c(N), tl_c(N), lse_c(N), loss_c(N), dl_c(NV);
  std::vector<int32_t> tg_c = targets;
  const Tensor lg_t = Tensor::F32(lg_c.data(), {N, Vs}, Device::kCpu),
               tg_t = Tensor::I32(tg_c.data(), {N}, Device::kCpu);
  ASSERT_TRUE(
      cpu.CrossEntropyRowMax(Tensor::F32(max_c.data(), {N}, Device::kCpu), lg_t, c.vocab_start, c.V)
          .ok());
  ASSERT_TRUE(cpu.CrossEntropyPartials(Tensor::F32(sum_c.data(), {N}, Device::kCpu),
                                       Tensor::F32(tl_c.data(), {N}, Device::kCpu), lg_t, tg_t,
                                       Tensor::F32(max_c.data(), {N}, Device::kCpu), c.vocab_start,
                                       c.V)
                  .ok());
  // A shard of padding only has sum 0 (log = -inf); the loss is defined on
  // reduced statistics, so give it a positive sum as the all-reduce would.
  std::vector<float> sum_for_loss = sum_c;
  for (float& x : sum_for_loss) x = x > 0.0f ? x : 1.0f;
  ASSERT_TRUE(cpu.CrossEntropyLoss(Tensor::F32(loss_c.data(), {N}, Device::kCpu),
                                   Tensor::F32(lse_c.data(), {N}, Device::kCpu),
                                   Tensor::F32(max_c.data(), {N}, Device::kCpu),
                                   Tensor::F32(sum_for_loss.data(), {N}, Device::kCpu),
                                   Tensor::F32(tl_c.data(), {N}, Device::kCpu))
                  .ok());
  ASSERT_TRUE(cpu.CrossEntropyBackward(Tensor::F32(dl_c.data(), {N, Vs}, Device::kCpu), lg_t, tg_t,
                                       Tensor::F32(lse_c.data(), {N}, Device::kCpu), c.vocab_start,
                                       c.V, dloss)
                  .ok());

  // ---- GPU, each step on the CPU's inputs ----
  GpuStored lg_g(logits, c.dtype, c.offset), dl_g(Poison(NV), c.dtype, c.offset);
  GpuInts tg_g(targets);
  GpuFloats max_g(Poison(N)), sum_g(Poison(N)), tl_g(Poison(N)), lse_g(Poison(N)),
      loss_g(Poison(N));
  GpuFloats max_in(max_c), sum_in(sum_for_loss), tl_in(tl_c), lse_in(lse_c);
  auto row_max = [&] {
    return cuda::CrossEntropyRowMax(max_g.View({N}), lg_g.View({N, Vs}), c.vocab_start, c.V);
  };
  auto partials = [&] {
    return cuda::CrossEntropyPartials(sum_g.View({N}), tl_g.View({N}), lg_g.View({N, Vs}),
                                      tg_g.View({N}), max_in.View({N}), c.vocab_start, c.V);
  };
  auto backward = [&](const GpuStored& out) {
    return cuda::CrossEntropyBackward(out.View({N, Vs}), lg_g.View({N, Vs}), tg_g.View({N}),
                                      lse_in.View({N}), c.vocab_start, c.V, dloss);
  };
  absl::Status st = row_max();
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE((st = partials()).ok()) << st;
  ASSERT_TRUE((st = cuda::CrossEntropyLoss(loss_g.View({N}), lse_g.View({N}), max_in.View({N}),
                                           sum_in.View({N}), tl_in.View({N})))
                  .ok())
      << st;
  ASSERT_TRUE((st = backward(dl_g)).ok()) << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> mx = max_g.Download(), sum = sum_g.Download(), dl = dl_g.Download();
  ExpectBitwise("row_max", mx, max_c);
  if (real == 0) {
    for (float m : mx) ASSERT_EQ(m, -FLT_MAX) << "a shard of padding only";
  }
  ExpectClose("sum_exp", sum, sum_c, kSumRel, 0.0);
  ExpectBitwise("target_logit", tl_g.Download(), tl_c);
  ExpectClose("lse", lse_g.Download(), lse_c, kLossTol, kLossTol);
  ExpectClose("losses", loss_g.Download(), loss_c, kLossTol, kLossTol);
  ExpectClose("dlogits", dl, dl_c, kGradRel + r16, kGradAbsPerDloss * dloss);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = real; j < Vs; ++j) {
      ASSERT_EQ(std::bit_cast<uint32_t>(dl[n * Vs + j]), 0u) << "padding column " << j;
    }
  }

  // ---- determinism, and the backward in place ----
  max_g.Upload(Poison(N));
  sum_g.Upload(Poison(N));
  ASSERT_TRUE((st = row_max()).ok()) << st;
  ASSERT_TRUE((st = partials()).ok()) << st;
  ASSERT_TRUE((st = backward(lg_g)).ok()) << st;  // dlogits aliasing logits
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectBitwise("row_max, second run", max_g.Download(), mx);
  ExpectBitwise("sum_exp, second run", sum_g.Download(), sum);
  ExpectBitwise("dlogits in place", lg_g.Download(), dl);

  // ---- the fused classifier, where the shard is the whole vocabulary ----
  // Its online sum rounds differently, inside the same tolerances.
  if (c.vocab_start != 0 || real < c.V) return;
  GpuStored fused(logits, c.dtype, c.offset);
  loss_g.Upload(Poison(N));
  lse_g.Upload(Poison(N));
  ASSERT_TRUE((st = cuda::CrossEntropyFused(loss_g.View({N}), lse_g.View({N}), fused.View({N, Vs}),
                                            tg_g.View({N}), c.V, dloss))
                  .ok())
      << st;
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ExpectClose("fused lse", lse_g.Download(), lse_c, kLossTol, kLossTol);
  ExpectClose("fused losses", loss_g.Download(), loss_c, kLossTol, kLossTol);
  const std::vector<float> fused_dl = fused.Download();
  ExpectClose("fused dlogits", fused_dl, dl_c, kGradRel + r16, kGradAbsPerDloss * dloss);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = real; j < Vs; ++j) {
      ASSERT_EQ(std::bit_cast<uint32_t>(fused_dl[n * Vs + j]), 0u) << "fused padding column " << j;
    }
  }
}

// Every shape in both storages.
INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyGpuTest, testing::ValuesIn([] {
                           const std::vector<Case> shapes = {
                               // N, V, vocab_start, vshard, offset
                               {1, 1, 0, 1, 0},          // one row, one column
                               {3, 5, 0, 8, 0},          // padded, tiny
                               {7, 99, 0, 99, 0},        // odd width: scalar kernels
                               {6, 90, 0, 100, 0},       // 4 | 100, 8 does not: bf16 scalar
                               {1, 50257, 0, 50304, 0},  // GPT-2, one row
                               {4, 50257, 0, 50304, 0},  // GPT-2
                               {33, 1000, 256, 256, 0},  // a middle shard, all real
                               {33, 1000, 768, 256, 0},  // last shard: 232 real, 24 padding
                               {5, 1000, 1000, 24, 0},   // padding only
                               {9, 3000, 0, 3072, 1},    // misaligned views
                           };
                           std::vector<Case> cases;
                           for (DType dt : {DType::kF32, DType::kBF16}) {
                             for (Case c : shapes) {
                               c.dtype = dt;
                               cases.push_back(c);
                             }
                           }
                           return cases;
                         }()),
                         CaseName);

// Argument checks run before anything touches the GPU, so they run everywhere.
TEST(CrossEntropyGpuArgs, RejectsBadArguments) {
  float f[16];
  int32_t i[4];
  auto gf = [&](std::initializer_list<int64_t> dims) {
    return Tensor(f, DType::kF32, dims, Device::kCuda);
  };
  const Tensor tg = Tensor(i, DType::kI32, {2}, Device::kCuda);
  absl::Status s = cuda::CrossEntropyRowMax(gf({2}), Tensor::F32(f, {2, 8}, Device::kCpu), 0, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "logits on the host";
  s = cuda::CrossEntropyRowMax(gf({3}), gf({2, 8}), 0, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "row_max of the wrong size";
  s = cuda::CrossEntropyRowMax(gf({2}), gf({2, 8}), 0, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "vocab_size 0";
  s = cuda::CrossEntropyPartials(gf({2}), gf({2}), gf({2, 8}), gf({2}), gf({2}), 0, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "f32 targets";
  s = cuda::CrossEntropyLoss(gf({2}), gf({2}), gf({2}), gf({3}), gf({2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "sum_exp of the wrong size";
  s = cuda::CrossEntropyBackward(gf({2, 4}), gf({2, 8}), tg, gf({2}), 0, 8, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "dlogits of the wrong width";
  s = cuda::CrossEntropyBackward(gf({2, 8}), gf({2, 8}), tg, gf({2}), -1, 8, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "negative vocab_start";

  // Storage: logits f32 or bf16, dlogits like the logits, statistics f32.
  auto gb = [&](std::initializer_list<int64_t> dims) {
    return Tensor(f, DType::kBF16, dims, Device::kCuda);
  };
  s = cuda::CrossEntropyBackward(gf({2, 8}), gb({2, 8}), tg, gf({2}), 0, 8, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 logits, f32 dlogits";
  EXPECT_NE(s.message().find("dlogits"), std::string::npos) << s;
  s = cuda::CrossEntropyBackward(gb({2, 8}), gf({2, 8}), tg, gf({2}), 0, 8, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "f32 logits, bf16 dlogits";
  s = cuda::CrossEntropyBackward(gb({2, 8}), gb({2, 8}), tg, gb({2}), 0, 8, 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 lse";
  s = cuda::CrossEntropyRowMax(gb({2}), gb({2, 8}), 0, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 row_max";
  s = cuda::CrossEntropyPartials(gb({2}), gf({2}), gb({2, 8}), tg, gf({2}), 0, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 sum_exp";
  s = cuda::CrossEntropyPartials(gf({2}), gf({2}), gb({2, 8}), tg, gb({2}), 0, 8);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 row_max";
  s = cuda::CrossEntropyLoss(gf({2}), gb({2}), gf({2}), gf({2}), gf({2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "bf16 lse";
  s = cuda::CrossEntropyRowMax(gf({2}), Tensor(i, DType::kI32, {1, 4}, Device::kCuda), 0, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "i32 logits";
  EXPECT_NE(s.message().find("f32 or bf16"), std::string::npos) << s;
}

}  // namespace
}  // namespace ladder
