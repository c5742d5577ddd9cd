// Reading a run directory: what is required, the one-line errors for bad
// input, the torn last line a killed run leaves, and that a failed report
// writes nothing.
#include "src/report/run_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "src/report/report.h"

namespace ladder::report {
namespace {

constexpr char kStep1[] =
    R"({"step":1,"loss":5.5,"lr":0.001,"grad_norm":1.2,"tokens_per_s":1000,"mfu":0.01,)"
    R"("time_s":{"data":0.001,"forward":0.02,"backward":0.04,"optimizer":0.005,"bubble":0,)"
    R"("checkpoint":0,"step":0.07},"comm":{"data":{"seconds":0.003,"bytes":4096}},)"
    R"("memory":{"weights":1000,"grads":1000,"optimizer":2000,"activations":500}})";
constexpr char kStep2[] =
    R"({"step":2,"loss":null,"tokens_per_s":1100,"mfu":0.011,"time_s":{"step":0.06},)"
    R"("val_loss":5.1,"rank_seconds":[0.05,0.06]})";

class RunDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (std::filesystem::temp_directory_path() / ("run_data_test_" + std::to_string(::getpid())))
            .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string dir_;
};

TEST_F(RunDataTest, ReadsEveryFile) {
  Write("metrics.jsonl", std::string(kStep1) + "\n" + kStep2 + "\n");
  Write("events.jsonl", R"({"time":1764820000,"step":2,"kind":"save","detail":"step-00000002"})"
                        "\n");
  Write("ranks.json", R"([{"rank":0,"pp":0,"dp":0,"tp":0,"memory":{"weights":10,"allocated":50},)"
                      R"("comm_bytes":{"data":7}},{"rank":1,"pp":0,"dp":1,"tp":0}])");
  Write("gpu.jsonl", R"({"time":1.5,"gpu":1,"util":80,"mem_used":3,"mem_total":9,"power_w":null})"
                     "\n");
  auto run = ReadRunData(dir_);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->steps.size(), 2u);
  EXPECT_EQ(run->steps[0].step, 1);
  EXPECT_DOUBLE_EQ(run->steps[0].t_backward, 0.04);
  ASSERT_EQ(run->steps[0].comm.size(), 1u);
  EXPECT_EQ(run->steps[0].comm[0].axis, "data");
  EXPECT_EQ(run->steps[0].comm[0].bytes, 4096);
  EXPECT_EQ(run->steps[0].memory.optimizer, 2000);
  EXPECT_TRUE(std::isnan(run->steps[1].loss)) << "null is a non-finite number";
  EXPECT_DOUBLE_EQ(run->steps[1].val_loss.value(), 5.1);
  EXPECT_TRUE(run->steps[0].rank_seconds.empty());
  EXPECT_EQ(run->steps[1].rank_seconds, (std::vector<double>{0.05, 0.06}));
  ASSERT_EQ(run->events.size(), 1u);
  EXPECT_EQ(run->events[0].kind, "save");
  EXPECT_EQ(run->events[0].detail, "step-00000002");
  ASSERT_EQ(run->ranks.size(), 2u);
  EXPECT_EQ(run->ranks[0].allocated, 50);
  EXPECT_EQ(run->ranks[0].comm_bytes.at("data"), 7);
  EXPECT_EQ(run->ranks[1].dp, 1);
  ASSERT_EQ(run->gpu.size(), 1u);
  EXPECT_EQ(run->gpu[0].gpu, 1);
  EXPECT_TRUE(std::isnan(run->gpu[0].power_w));
  EXPECT_TRUE(run->warnings.empty());
}

TEST_F(RunDataTest, ATornLastLineIsDroppedWithAWarning) {
  Write("metrics.jsonl", std::string(kStep1) + "\n" + std::string(kStep2).substr(0, 30));
  auto run = ReadRunData(dir_);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->steps.size(), 1u);
  ASSERT_EQ(run->warnings.size(), 1u);
  EXPECT_EQ(run->warnings[0], dir_ +
                                  "/metrics.jsonl:2: last line is cut short (the run stopped "
                                  "mid-write); read the 1 lines before it");
}

TEST_F(RunDataTest, AMalformedLineNamesFileAndLine) {
  Write("metrics.jsonl", std::string(kStep1) + "\n{\"step\":2,\"loss\":\n" + kStep2 + "\n");
  auto run = ReadRunData(dir_);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run.status().message(),
            dir_ + "/metrics.jsonl:2: not a JSON object: '{\"step\":2,\"loss\":'");
  // A torn line that ends in a newline was finished by the writer: an error too.
  Write("metrics.jsonl", std::string(kStep1) + "\n{\"step\":2\n");
  EXPECT_EQ(ReadRunData(dir_).status().message(),
            dir_ + "/metrics.jsonl:2: not a JSON object: '{\"step\":2'");
  Write("metrics.jsonl", std::string(kStep1) + "\n{\"step\":2}\n");
  EXPECT_EQ(ReadRunData(dir_).status().message(), dir_ + "/metrics.jsonl:2: no number \"loss\"");
  Write("metrics.jsonl", std::string(kStep1) + "\n");
  Write("events.jsonl", "{\"time\":1,\"step\":1}\n");
  EXPECT_EQ(ReadRunData(dir_).status().message(), dir_ + "/events.jsonl:1: no string \"kind\"");
}

TEST_F(RunDataTest, MissingDirectoryOrMetricsIsNotFound) {
  auto no_dir = ReadRunData(dir_ + "/nope");
  EXPECT_EQ(no_dir.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(no_dir.status().message(), "run directory '" + dir_ + "/nope' does not exist");
  auto no_metrics = ReadRunData(dir_);
  EXPECT_EQ(no_metrics.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(no_metrics.status().message(),
            "'" + dir_ + "/metrics.jsonl' does not exist (not a ladder train output directory?)");
}

TEST_F(RunDataTest, ReportWritesPageAndPicturesOrNothing) {
  Write("metrics.jsonl", std::string(kStep1) + "\n" + kStep2 + "\n");
  std::vector<std::string> warnings;
  auto path = WriteRunReport(dir_, "", &warnings);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_ + "/report.html");
  const std::string html = [&] {
    std::ifstream in(*path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  EXPECT_NE(html.find("<h1>ladder run report</h1>"), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "self-contained, no scripts";
  EXPECT_NE(html.find("No gpu.jsonl"), std::string::npos) << "a skipped plot says why";
  for (const char* png : {"report-loss.png", "report-tokens.png", "report-time.png",
                          "report-memory.png", "report-comm.png", "report-ranks.png"}) {
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + png)) << png;
    EXPECT_NE(html.find(std::string("href=\"") + png + "\""), std::string::npos) << png;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/report-gpu-util.png"));

  // A bad input leaves no page behind.
  std::filesystem::remove(*path);
  Write("metrics.jsonl", "oops\n");
  EXPECT_FALSE(WriteRunReport(dir_, "").ok());
  EXPECT_FALSE(std::filesystem::exists(*path));

  // An --out that is a directory is refused before anything is written.
  Write("metrics.jsonl", std::string(kStep1) + "\n");
  std::filesystem::create_directories(dir_ + "/pages");
  absl::StatusOr<std::string> into_dir = WriteRunReport(dir_, dir_ + "/pages");
  ASSERT_FALSE(into_dir.ok());
  EXPECT_EQ(into_dir.status().message(),
            "'" + dir_ + "/pages' is a directory: --out names the HTML file to write");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/pages-loss.png"));
  // A page that cannot be written takes its pictures with it.
  std::filesystem::create_directories(dir_ + "/stuck.html.tmp");
  ASSERT_FALSE(WriteRunReport(dir_, dir_ + "/stuck.html").ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/stuck-loss.png"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/stuck-loss.png.tmp"));
}

TEST_F(RunDataTest, APlotWithNothingFiniteBecomesANote) {
  Write("metrics.jsonl", R"({"step":1,"loss":null,"tokens_per_s":null,"mfu":0.1})"
                         "\n"
                         R"({"step":2,"loss":null,"tokens_per_s":null,"mfu":0.2})"
                         "\n");
  auto path = WriteRunReport(dir_, dir_ + "/page.html");
  ASSERT_TRUE(path.ok()) << path.status();
  std::ifstream in(*path);
  const std::string html(std::istreambuf_iterator<char>(in), {});
  EXPECT_NE(html.find("Nothing to plot: every value is missing or not finite."), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/page-tokens.png"));
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/page-mfu.png")) << "PNGs are named after the page";
}

}  // namespace
}  // namespace ladder::report
