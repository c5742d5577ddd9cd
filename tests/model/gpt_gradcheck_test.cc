// The whole model against a double-precision reference: the reference GPT is
// composed from the reference ops (tests/backend/reference_ops.h); its loss
// must match the fp32 model's, and central differences of it must match the
// model's analytical gradients for sampled elements of every tensor.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/core/philox.h"
#include "src/model/gpt.h"
#include "tests/backend/reference_ops.h"

namespace ladder {
namespace {

// Mean cross-entropy of a GPT-2 forward, all in double, over weights laid out
// by ParameterTable(GptParameterSpecs(cfg)).
double ReferenceLoss(const GptConfig& cfg, const ParameterTable& table, const ref::Vec& w,
                     const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int B,
                     int T) {
  const int C = cfg.n_embd, N = B * T, Vp = cfg.padded_vocab();
  int next = 0;
  auto take = [&]() {
    const int i = next++;
    return ref::Vec(w.begin() + table.offset(i),
                    w.begin() + table.offset(i) + table.spec(i).numel());
  };
  const ref::Vec wte = take(), wpe = take();
  ref::Vec x = ref::Embedding(tokens, ref::SequencePositions(B, T), C, wte, wpe);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const ref::Vec ln1w = take(), ln1b = take(), qkvw = take(), qkvb = take(), projw = take(),
                   projb = take(), ln2w = take(), ln2b = take(), fcw = take(), fcb = take(),
                   fcprojw = take(), fcprojb = take();
    const ref::Vec ln1 = ref::ResidualLayerNorm(x, nullptr, ln1w, ln1b, N, C).y;
    const ref::Vec qkv = ref::Matmul(ln1, qkvw, &qkvb, N, C, 3 * C);
    ref::Vec atty, lse;
    ref::CausalAttention(qkv, B, T, cfg.n_head, cfg.head_size(), &atty, &lse);
    const ref::Vec attn = ref::Matmul(atty, projw, &projb, N, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += attn[i];
    const ref::Vec ln2 = ref::ResidualLayerNorm(x, nullptr, ln2w, ln2b, N, C).y;
    const ref::Vec h = ref::Gelu(ref::Matmul(ln2, fcw, &fcb, N, C, 4 * C));
    const ref::Vec mlp = ref::Matmul(h, fcprojw, &fcprojb, N, 4 * C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += mlp[i];
  }
  const ref::Vec lnfw = take(), lnfb = take();
  const ref::Vec lnf = ref::ResidualLayerNorm(x, nullptr, lnfw, lnfb, N, C).y;
  const ref::Vec logits = ref::Matmul(lnf, wte, nullptr, N, C, Vp);
  const ref::Vec losses = ref::CrossEntropy(logits, targets, N, Vp, cfg.vocab_size);
  double sum = 0;
  for (double v : losses) sum += v;
  return sum / N;
}

TEST(GptGradCheck, MatchesDoublePrecisionReference) {
  for (AttentionKind kind : {AttentionKind::kFlash, AttentionKind::kNaive}) {
    GptConfig cfg;
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    cfg.context = 8;
    cfg.vocab_size = 260;  // padded to 384
    cfg.attention = kind;
    const int B = 2, T = 8;
    PhiloxStream rng(3, 0);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (int i = 0; i < B * T; ++i) {
      tokens[i] = static_cast<int32_t>(rng.NextU32() % cfg.vocab_size);
      targets[i] = static_cast<int32_t>(rng.NextU32() % cfg.vocab_size);
    }

    CpuBackend be;
    auto model = *Gpt::Create(cfg, &be, B, /*training=*/true);
    const ParameterTable& table = model->table();
    // Larger-than-GPT-2 init so every path carries signal the differences see.
    std::vector<float> w32(table.total_floats());
    FillNormal(w32.data(), 0, table.total_floats(), 11, 0, 0.0f, 0.3f);
    ASSERT_TRUE(model->SetWeights(w32.data()).ok());
    ASSERT_TRUE(model->ZeroGrads().ok());
    const double loss = *model->Forward(tokens.data(), targets.data(), B, T);
    ASSERT_TRUE(model->Backward(1.0f / (B * T)).ok());
    const float* grads = model->grads().f32();

    ref::Vec w = ref::ToDouble(w32);
    const double ref_loss = ReferenceLoss(cfg, table, w, tokens, targets, B, T);
    EXPECT_NEAR(loss, ref_loss, 1e-5 * ref_loss);

    // Sampled elements of every tensor (and the padded rows of wte, whose
    // gradient must be exactly zero).
    const double eps = 1e-5;
    int checked = 0;
    for (int i = 0; i < table.size(); ++i) {
      const int64_t n = table.spec(i).numel();
      for (int k = 0; k < 6; ++k) {
        int64_t e = table.offset(i) + static_cast<int64_t>(rng.NextU32() % n);
        if (table.spec(i).name == "wte" && k == 5) e = table.offset(i) + 300 * cfg.n_embd + 3;
        const double saved = w[e];
        w[e] = saved + eps;
        const double up = ReferenceLoss(cfg, table, w, tokens, targets, B, T);
        w[e] = saved - eps;
        const double down = ReferenceLoss(cfg, table, w, tokens, targets, B, T);
        w[e] = saved;
        const double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(grads[e], numeric, 2e-3 * std::fabs(numeric) + 2e-5)
            << table.spec(i).name << " element " << e - table.offset(i);
        ++checked;
      }
    }
    EXPECT_EQ(checked, table.size() * 6);
  }
}

}  // namespace
}  // namespace ladder
