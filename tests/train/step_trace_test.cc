// --trace-steps: the A:B parse and its one-line errors, and how a window is
// fitted to the steps a run takes (explicit: cut, or refused when outside;
// default: moved and cut).
#include "src/train/step_trace.h"

#include "gtest/gtest.h"

namespace ladder {
namespace {

TEST(StepTraceTest, ParsesAWindow) {
  absl::StatusOr<StepWindow> w = ParseStepWindow("4:7");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->first, 4);
  EXPECT_EQ(w->last, 7);
  w = ParseStepWindow("5:5");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->first, 5);
  EXPECT_EQ(w->last, 5);
}

TEST(StepTraceTest, RefusesMalformedWindows) {
  for (const char* bad : {"", "3", "3-4", "a:b", "0:2", "4:3", "2:", ":3", "1:2:3", "-1:2"}) {
    absl::StatusOr<StepWindow> w = ParseStepWindow(bad);
    ASSERT_FALSE(w.ok()) << bad;
    EXPECT_EQ(w.status().message(),
              absl::StrCat("--trace-steps '", bad,
                           "': expected A:B, the first and last step to trace (1 <= A <= B)"));
  }
}

TEST(StepTraceTest, FitsWindowsToTheRun) {
  StepWindow w;
  w.first = 5;
  w.last = 30;
  absl::StatusOr<StepWindow> fit = FitStepWindow(w, /*explicit_window=*/true, 1, 20);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->first, 5);
  EXPECT_EQ(fit->last, 20);
  fit = FitStepWindow(w, true, 11, 20);  // resumed at step 10
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->first, 11);
  EXPECT_EQ(fit->last, 20);
  w.first = 25;
  fit = FitStepWindow(w, true, 1, 20);
  ASSERT_FALSE(fit.ok());
  EXPECT_EQ(fit.status().message(), "--trace-steps 25:30 has no step in this run (steps 1 to 20)");

  const StepWindow default_window;  // 2:3
  fit = FitStepWindow(default_window, false, 1, 1);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->first, 1);
  EXPECT_EQ(fit->last, 1);
  fit = FitStepWindow(default_window, false, 11, 20);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->first, 11);
  EXPECT_EQ(fit->last, 11);
  fit = FitStepWindow(default_window, false, 1, 20);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->first, 2);
  EXPECT_EQ(fit->last, 3);
}

}  // namespace
}  // namespace ladder
