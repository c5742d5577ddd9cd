// Sharded parameter tables: every tensor/pipeline layout holds exactly the
// slices of the logical tensors it should, and starts from the same weights.
#include "src/model/parameters.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace ladder {
namespace {

GptConfig Config() {
  GptConfig c;
  c.n_layer = 3;
  c.n_head = 4;
  c.n_embd = 32;
  c.context = 8;
  c.vocab_size = 300;  // padded to 384
  return c;
}

TEST(StageLayersTest, ContiguousAndBalanced) {
  EXPECT_EQ(StageLayers(12, 1, 0).first, 0);
  EXPECT_EQ(StageLayers(12, 1, 0).last, 12);
  // 7 layers on 3 stages: 3, 2, 2.
  EXPECT_EQ(StageLayers(7, 3, 0).first, 0);
  EXPECT_EQ(StageLayers(7, 3, 0).last, 3);
  EXPECT_EQ(StageLayers(7, 3, 1).first, 3);
  EXPECT_EQ(StageLayers(7, 3, 1).last, 5);
  EXPECT_EQ(StageLayers(7, 3, 2).first, 5);
  EXPECT_EQ(StageLayers(7, 3, 2).last, 7);
}

// Every layout's shards hold exactly the logical weights of the whole model
// at their logical positions, and together cover each element once per
// pipeline stage that holds the tensor.
TEST(ShardedTableTest, ShardsAreSlicesOfTheWholeModel) {
  const GptConfig cfg = Config();
  const ParameterTable whole(GptParameterSpecs(cfg));
  std::vector<float> full(whole.total_floats());
  whole.Initialize(full.data(), 42);
  for (int tp : {1, 2, 4}) {
    for (int pp : {1, 2, 3}) {
      std::map<std::string, std::vector<int>> covered;  // logical element -> times held
      for (int p = 0; p < pp; ++p) {
        for (int r = 0; r < tp; ++r) {
          auto table = ParameterTable::Create(GptParameterSpecs(cfg), {tp, r, pp, p});
          ASSERT_TRUE(table.ok()) << table.status();
          std::vector<float> shard(table->total_floats());
          table->Initialize(shard.data(), 42);
          for (int i = 0; i < table->size(); ++i) {
            const ParamSpec& s = table->spec(i);
            const int w = *whole.Find(s.name);
            const int64_t cols = s.shape.size() == 2 ? s.shape[1] : 1;
            const std::vector<int64_t>& ls = table->local_shape(i);
            const int64_t lcols = ls.size() == 2 ? ls[1] : 1;
            std::vector<int>& count = covered[s.name];
            count.resize(s.numel());
            for (int64_t row = 0; row < table->numel(i) / lcols; ++row) {
              for (int64_t c = 0; c < lcols; ++c) {
                const int64_t e =
                    table->LogicalRow(i, row) * cols + table->LogicalColumnStart(i) + c;
                ASSERT_EQ(shard[table->offset(i) + row * lcols + c], full[whole.offset(w) + e])
                    << s.name << " tp " << r << "/" << tp << " pp " << p << "/" << pp;
                ++count[e];
              }
            }
          }
        }
      }
      for (const auto& [name, count] : covered) {
        // The tied embedding lives on the first and the last stage.
        const int copies = (name == "wte" && pp > 1) ? 2 : 1;
        for (int c : count)
          ASSERT_EQ(c, (whole.spec(*whole.Find(name)).split == TpSplit::kReplicated ? tp * copies
                                                                                    : copies))
              << name << " tp " << tp << " pp " << pp;
      }
      EXPECT_EQ(covered.size(), static_cast<size_t>(whole.size()));
    }
  }
}

TEST(ShardedTableTest, StagesHoldTheirTensors) {
  const GptConfig cfg = Config();
  auto first = *ParameterTable::Create(GptParameterSpecs(cfg), {1, 0, 2, 0});
  auto last = *ParameterTable::Create(GptParameterSpecs(cfg), {1, 0, 2, 1});
  EXPECT_TRUE(first.Find("wte").ok());
  EXPECT_TRUE(first.Find("wpe").ok());
  EXPECT_TRUE(first.Find("h.1.mlp.fc.weight").ok());  // layers 0, 1 on stage 0
  EXPECT_FALSE(first.Find("h.2.ln_1.weight").ok());
  EXPECT_FALSE(first.Find("ln_f.weight").ok());
  EXPECT_TRUE(last.Find("wte").ok());
  EXPECT_FALSE(last.Find("wpe").ok());
  EXPECT_TRUE(last.Find("h.2.ln_1.weight").ok());
  EXPECT_TRUE(last.Find("ln_f.bias").ok());
  const GptTensors t =
      BindGptTensors(last, Tensor::F32(nullptr, {last.total_floats()}, Device::kCpu), cfg);
  EXPECT_EQ(t.layers.size(), 1u);
  EXPECT_TRUE(t.wpe.empty());
}

TEST(ShardedTableTest, ColumnAndRowParallelShapes) {
  const GptConfig cfg = Config();  // C = 32
  auto t = *ParameterTable::Create(GptParameterSpecs(cfg), {2, 1, 1, 0});
  EXPECT_EQ(t.local_shape(*t.Find("h.0.attn.qkv.weight")), (std::vector<int64_t>{48, 32}));
  EXPECT_EQ(t.local_shape(*t.Find("h.0.attn.proj.weight")), (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(t.local_shape(*t.Find("h.0.mlp.fc.bias")), (std::vector<int64_t>{64}));
  EXPECT_EQ(t.local_shape(*t.Find("h.0.mlp.proj.bias")), (std::vector<int64_t>{32}));
  EXPECT_EQ(t.local_shape(*t.Find("wte")), (std::vector<int64_t>{192, 32}));
  // Rank 1's q rows start at head 2: logical row 16; its k rows at 32 + 16.
  const int qkv = *t.Find("h.0.attn.qkv.weight");
  EXPECT_EQ(t.LogicalRow(qkv, 0), 16);
  EXPECT_EQ(t.LogicalRow(qkv, 16), 48);
  EXPECT_EQ(t.LogicalRow(qkv, 47), 95);
  EXPECT_EQ(t.LogicalColumnStart(*t.Find("h.0.attn.proj.weight")), 16);
}

TEST(ShardedTableTest, BadLayoutsAreRefused) {
  GptConfig cfg = Config();
  auto too_many_stages = ParameterTable::Create(GptParameterSpecs(cfg), {1, 0, 4, 3});
  EXPECT_EQ(too_many_stages.status().code(), absl::StatusCode::kInvalidArgument);
  cfg.n_embd = 36;  // 36 / 8 does not divide evenly
  cfg.n_head = 4;
  auto bad_split = ParameterTable::Create(GptParameterSpecs(cfg), {8, 0, 1, 0});
  EXPECT_EQ(bad_split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_split.status().message().find("does not split"), std::string::npos);
}

}  // namespace
}  // namespace ladder
