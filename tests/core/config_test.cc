#include "src/core/config.h"

#include "gtest/gtest.h"

namespace ladder {
namespace {

TEST(ConfigTest, ParsesTypedValuesAndComments) {
  auto cfg = KeyValueConfig::ParseText(
      "# model\nn_layer = 4  # layers\nlr=1e-3\nname = tiny\n"
      "flash = false\n",
      "test.conf");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  int n_layer = 0;
  double lr = 0;
  std::string name;
  bool flash = true;
  ASSERT_TRUE(cfg->Get("n_layer", &n_layer).ok());
  ASSERT_TRUE(cfg->Get("lr", &lr).ok());
  ASSERT_TRUE(cfg->Get("name", &name).ok());
  ASSERT_TRUE(cfg->Get("flash", &flash).ok());
  EXPECT_EQ(n_layer, 4);
  EXPECT_DOUBLE_EQ(lr, 1e-3);
  EXPECT_EQ(name, "tiny");
  EXPECT_FALSE(flash);
  EXPECT_TRUE(cfg->CheckAllRead().ok());
}

TEST(ConfigTest, UnknownKeyIsNamedWithItsLine) {
  auto cfg = KeyValueConfig::ParseText("n_layer = 4\nn_layr = 5\n", "x.conf");
  ASSERT_TRUE(cfg.ok());
  int n = 0;
  ASSERT_TRUE(cfg->Get("n_layer", &n).ok());
  absl::Status s = cfg->CheckAllRead();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "x.conf:2: unknown key 'n_layr'");
}

TEST(ConfigTest, BadValueAndBadLineAreErrors) {
  auto cfg = KeyValueConfig::ParseText("n_layer = four\n", "x.conf");
  ASSERT_TRUE(cfg.ok());
  int n = 0;
  absl::Status s = cfg->Get("n_layer", &n);
  EXPECT_EQ(s.message(), "x.conf:1: 'n_layer' expects an integer, got 'four'");
  EXPECT_FALSE(KeyValueConfig::ParseText("just words\n", "y.conf").ok());
  EXPECT_FALSE(KeyValueConfig::ParseText("a = 1\na = 2\n", "y.conf").ok());
  EXPECT_EQ(KeyValueConfig::ParseFile("/nonexistent/x.conf").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace ladder
