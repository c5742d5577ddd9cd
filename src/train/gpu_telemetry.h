// GPU telemetry while training: a thread samples every GPU's utilization,
// memory and power through NVML and appends them to OUT/gpu.jsonl, one JSON
// object per GPU and sample (docs/formats.md):
//   {"time":1764820000.123,"gpu":0,"util":87,"mem_used":123,"mem_total":456,"power_w":312.5}
//
// NVML is loaded at run time with dlopen, only if present: ladder never links
// it (nor libcuda), so the same binary runs on machines without a driver.
// The library is libnvidia-ml.so.1, or the file the environment variable
// LADDER_NVML_LIBRARY names (tests point it at a fake NVML).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ladder {

class GpuTelemetry {
 public:
  // Starts sampling into out_dir/gpu.jsonl every period_ms milliseconds
  // (the first sample at once), appending to the file if it exists.
  //
  // Returns nullptr, writing nothing, when there is nothing to sample:
  // libnvidia-ml.so.1 is not installed, NVML finds no driver, or it reports
  // no GPU. Errors: InvalidArgument for period_ms < 1 or a
  // LADDER_NVML_LIBRARY that cannot be loaded or lacks an entry point (the
  // user asked for that library); NotFound when gpu.jsonl cannot be
  // created. A GPU whose utilization or memory cannot be read is left out
  // of that round; a power reading it does not support is written as null.
  static absl::StatusOr<std::unique_ptr<GpuTelemetry>> Start(const std::string& out_dir,
                                                             int period_ms);

  // Stops the thread after any sample in progress (at most one period's
  // wait), closes the file and unloads NVML.
  ~GpuTelemetry();

  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  // Samples written so far (one per GPU per round); any thread may call it.
  int64_t samples_written() const;

 private:
  struct State;  // the loaded library, the file and the thread (gpu_telemetry.cc)
  explicit GpuTelemetry(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace ladder
