#include "src/core/flags.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ladder {
namespace {

absl::Status ParseArgs(FlagSet& f, std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return f.Parse(static_cast<int>(argv.size()), argv.data());
}

TEST(FlagsTest, ParsesAllForms) {
  std::string out = "x";
  int64_t steps = 10;
  double temp = 1.0;
  bool verbose = false;
  FlagSet f("ladder test", "a test", "ARG");
  f.String("out", &out, "output");
  f.Int("steps", &steps, "steps");
  f.Double("temperature", &temp, "temperature");
  f.Bool("verbose", &verbose, "verbose");
  ASSERT_TRUE(
      ParseArgs(f, {"--out", "dir", "--steps=5", "pos", "--temperature", "0.5", "--verbose"}).ok());
  EXPECT_EQ(out, "dir");
  EXPECT_EQ(steps, 5);
  EXPECT_DOUBLE_EQ(temp, 0.5);
  EXPECT_TRUE(verbose);
  EXPECT_TRUE(f.IsSet("steps"));
  ASSERT_EQ(f.positional().size(), 1u);
  EXPECT_EQ(f.positional()[0], "pos");
}

TEST(FlagsTest, ErrorsNameTheFlag) {
  int64_t steps = 10;
  FlagSet f("ladder test", "a test");
  f.Int("steps", &steps, "steps");
  absl::Status s = ParseArgs(f, {"--stpes", "3"});
  EXPECT_EQ(s.message(), "unknown flag --stpes (see 'ladder test --help')");
  FlagSet g("ladder test", "a test");
  g.Int("steps", &steps, "steps");
  s = ParseArgs(g, {"--steps", "many"});
  EXPECT_EQ(s.message(), "flag --steps expects an integer, got 'many'");
  FlagSet h("ladder test", "a test");
  h.Int("steps", &steps, "steps");
  s = ParseArgs(h, {"--steps"});
  EXPECT_EQ(s.message(), "flag --steps needs a value");
  // A command that takes no positional arguments refuses them (a typo such
  // as -steps would otherwise be dropped); doubles must be finite.
  double temp = 1.0;
  FlagSet k("ladder test", "a test");
  k.Int("steps", &steps, "steps");
  k.Double("temperature", &temp, "temperature");
  s = ParseArgs(k, {"-steps", "3"});
  EXPECT_EQ(s.message(), "unexpected argument '-steps' (see 'ladder test --help')");
  for (const char* bad : {"inf", "nan", "-inf", "1e999"}) {
    FlagSet d("ladder test", "a test");
    d.Double("temperature", &temp, "temperature");
    s = ParseArgs(d, {"--temperature", bad});
    EXPECT_EQ(s.message(),
              absl::StrCat("flag --temperature expects a finite number, got '", bad, "'"));
  }
}

}  // namespace
}  // namespace ladder
