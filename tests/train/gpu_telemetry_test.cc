// GPU telemetry against a fake NVML (tests/train/fake_nvml.c, whose path
// meson passes in LADDER_FAKE_NVML): the sampler writes the fake's values
// to gpu.jsonl, shuts NVML down when destroyed, and finding no GPU is not an
// error while a named library that is not NVML is.
#include "src/train/gpu_telemetry.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

namespace ladder {
namespace {

class GpuTelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fake = std::getenv("LADDER_FAKE_NVML");
    ASSERT_NE(fake, nullptr) << "meson sets LADDER_FAKE_NVML to the fake NVML's path";
    fake_ = fake;
    setenv("LADDER_NVML_LIBRARY", fake_.c_str(), 1);
    unsetenv("FAKE_NVML_DEVICES");
    unsetenv("FAKE_NVML_INIT_FAIL");
    dir_ = std::filesystem::temp_directory_path() /
           ("gpu_telemetry_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string fake_;
  std::filesystem::path dir_;
};

TEST_F(GpuTelemetryTest, WritesTheFakeValuesAndShutsNvmlDown) {
  // Our own handle on the fake, to see whether NVML is initialized.
  void* fake = dlopen(fake_.c_str(), RTLD_NOW);
  ASSERT_NE(fake, nullptr);
  auto active = reinterpret_cast<int (*)()>(dlsym(fake, "fake_nvml_active"));
  ASSERT_NE(active, nullptr);

  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    auto telemetry = GpuTelemetry::Start(dir_.string(), 5);
    ASSERT_TRUE(telemetry.ok()) << telemetry.status();
    ASSERT_NE(*telemetry, nullptr);
    EXPECT_EQ(active(), 1);
    for (int i = 0; i < 400 && (*telemetry)->samples_written() < 6; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_GE((*telemetry)->samples_written(), 6);
  }
  EXPECT_EQ(active(), 0) << "the destructor shuts NVML down";
  dlclose(fake);

  std::ifstream in(dir_ / "gpu.jsonl");
  std::string line;
  int lines[2] = {0, 0};
  double last_time = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const int gpu = j.at("gpu").get<int>();
    ASSERT_TRUE(gpu == 0 || gpu == 1) << line;
    ++lines[gpu];
    const double time = j.at("time").get<double>();
    EXPECT_GE(time, before - 1) << line;
    EXPECT_GE(time, last_time) << line;
    last_time = time;
    EXPECT_EQ(j.at("util").get<int>(), 50 + 10 * gpu) << line;
    EXPECT_EQ(j.at("mem_used").get<int64_t>(), (gpu + 1) * (int64_t{1} << 30)) << line;
    EXPECT_EQ(j.at("mem_total").get<int64_t>(), 80 * (int64_t{1} << 30)) << line;
    if (gpu == 0) {
      EXPECT_DOUBLE_EQ(j.at("power_w").get<double>(), 300.0) << line;
    } else {
      EXPECT_TRUE(j.at("power_w").is_null()) << "GPU 1's power is not supported: " << line;
    }
  }
  EXPECT_GE(lines[0], 3);
  EXPECT_EQ(lines[0], lines[1]) << "every round samples both GPUs";
}

TEST_F(GpuTelemetryTest, NoGpuMeansNoSamplerAndNoFile) {
  setenv("FAKE_NVML_DEVICES", "0", 1);
  auto none = GpuTelemetry::Start(dir_.string(), 5);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  unsetenv("FAKE_NVML_DEVICES");

  setenv("FAKE_NVML_INIT_FAIL", "1", 1);
  auto no_driver = GpuTelemetry::Start(dir_.string(), 5);
  ASSERT_TRUE(no_driver.ok()) << no_driver.status();
  EXPECT_EQ(*no_driver, nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "gpu.jsonl"));
}

TEST_F(GpuTelemetryTest, ANamedLibraryThatIsNotNvmlIsAnError) {
  setenv("LADDER_NVML_LIBRARY", "/nonexistent/libnvml.so", 1);
  auto missing = GpuTelemetry::Start(dir_.string(), 5);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      missing.status().message().find("LADDER_NVML_LIBRARY: cannot load '/nonexistent/libnvml.so'"),
      std::string::npos)
      << missing.status();

  setenv("LADDER_NVML_LIBRARY", "libz.so.1", 1);
  auto not_nvml = GpuTelemetry::Start(dir_.string(), 5);
  ASSERT_FALSE(not_nvml.ok());
  EXPECT_EQ(not_nvml.status().message(), "'libz.so.1' is not NVML: it has no nvmlInit_v2");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "gpu.jsonl"));
}

TEST_F(GpuTelemetryTest, RefusesAPeriodBelowOneMillisecond) {
  auto zero = GpuTelemetry::Start(dir_.string(), 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(), "GPU telemetry period must be at least 1 ms, not 0");
}

// Where a real NVML and a GPU exist (the default library, no
// LADDER_NVML_LIBRARY), the samples are plausible; elsewhere this skips.
TEST_F(GpuTelemetryTest, SamplesTheRealNvmlWherePresent) {
  unsetenv("LADDER_NVML_LIBRARY");
  auto telemetry = GpuTelemetry::Start(dir_.string(), 5);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  if (*telemetry == nullptr) GTEST_SKIP() << "no NVML or no GPU on this machine";
  for (int i = 0; i < 400 && (*telemetry)->samples_written() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  telemetry->reset();
  std::ifstream in(dir_ / "gpu.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "no sample from the real NVML";
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_GE(j.at("util").get<int>(), 0);
  EXPECT_LE(j.at("util").get<int>(), 100);
  EXPECT_GT(j.at("mem_total").get<int64_t>(), 0);
  EXPECT_LE(j.at("mem_used").get<int64_t>(), j.at("mem_total").get<int64_t>());
}

}  // namespace
}  // namespace ladder
