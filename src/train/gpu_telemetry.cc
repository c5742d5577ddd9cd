#include "src/train/gpu_telemetry.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ladder {
namespace {

// The part of NVML's C API ladder uses, declared from NVML's API reference
// (its header, nvml.h, comes with the CUDA toolkit, which building ladder
// does not need). Every call returns an nvmlReturn_t, 0 for success.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the last sample period a kernel was running
  unsigned int memory;  // percent of it device memory was being read or written
};
struct nvmlMemory_t {
  unsigned long long total, free, used;  // bytes
};

struct NvmlApi {
  nvmlReturn_t (*init)() = nullptr;                                      // nvmlInit_v2
  nvmlReturn_t (*shutdown)() = nullptr;                                  // nvmlShutdown
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;                 // nvmlDeviceGetCount_v2
  nvmlReturn_t (*device_handle)(unsigned int, nvmlDevice_t*) = nullptr;  // ..GetHandleByIndex_v2
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power_mw)(nvmlDevice_t, unsigned int*) = nullptr;  // milliwatts
};

template <typename Fn>
bool Bind(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}

}  // namespace

struct GpuTelemetry::State {
  void* library = nullptr;
  NvmlApi nvml;
  bool initialized = false;
  std::vector<nvmlDevice_t> devices;
  std::FILE* file = nullptr;
  std::chrono::milliseconds period{0};

  std::thread thread;
  std::mutex mu;
  std::condition_variable wake;
  bool stop = false;  // guarded by mu
  std::atomic<int64_t> samples{0};

  ~State() {
    if (thread.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
      }
      wake.notify_all();
      thread.join();
    }
    if (file != nullptr) std::fclose(file);
    if (initialized) nvml.shutdown();
    if (library != nullptr) dlclose(library);
  }

  // One round: a line per GPU that answered, flushed so a killed run keeps it.
  void SampleOnce() {
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string lines;
    for (size_t i = 0; i < devices.size(); ++i) {
      nvmlUtilization_t util{};
      nvmlMemory_t mem{};
      unsigned int milliwatts = 0;
      if (nvml.utilization(devices[i], &util) != kNvmlSuccess ||
          nvml.memory(devices[i], &mem) != kNvmlSuccess) {
        continue;
      }
      const bool has_power = nvml.power_mw(devices[i], &milliwatts) == kNvmlSuccess;
      absl::StrAppendFormat(&lines,
                            "{\"time\":%.3f,\"gpu\":%d,\"util\":%u,\"mem_used\":%u,"
                            "\"mem_total\":%u,\"power_w\":%s}\n",
                            now, static_cast<int>(i), util.gpu, mem.used, mem.total,
                            has_power ? absl::StrFormat("%.3f", milliwatts / 1000.0) : "null");
      samples.fetch_add(1, std::memory_order_relaxed);
    }
    if (!lines.empty()) {
      std::fputs(lines.c_str(), file);
      std::fflush(file);
    }
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      lock.unlock();
      SampleOnce();
      lock.lock();
      wake.wait_for(lock, period, [this] { return stop; });
    }
  }
};

absl::StatusOr<std::unique_ptr<GpuTelemetry>> GpuTelemetry::Start(const std::string& out_dir,
                                                                  int period_ms) {
  if (period_ms < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU telemetry period must be at least 1 ms, not ", period_ms));
  }
  const char* named = std::getenv("LADDER_NVML_LIBRARY");
  const bool required = named != nullptr && named[0] != '\0';
  const std::string library = required ? named : "libnvidia-ml.so.1";

  auto state = std::make_unique<State>();
  state->period = std::chrono::milliseconds(period_ms);
  state->library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (state->library == nullptr) {
    if (!required) return std::unique_ptr<GpuTelemetry>();  // no NVML here: nothing to sample
    return absl::InvalidArgumentError(
        absl::StrCat("LADDER_NVML_LIBRARY: cannot load '", library, "': ", std::string(dlerror())));
  }
  NvmlApi& api = state->nvml;
  for (const auto& [name, ok] : {
           std::pair<const char*, bool>{"nvmlInit_v2",
                                        Bind(state->library, "nvmlInit_v2", &api.init)},
           {"nvmlShutdown", Bind(state->library, "nvmlShutdown", &api.shutdown)},
           {"nvmlDeviceGetCount_v2",
            Bind(state->library, "nvmlDeviceGetCount_v2", &api.device_count)},
           {"nvmlDeviceGetHandleByIndex_v2",
            Bind(state->library, "nvmlDeviceGetHandleByIndex_v2", &api.device_handle)},
           {"nvmlDeviceGetUtilizationRates",
            Bind(state->library, "nvmlDeviceGetUtilizationRates", &api.utilization)},
           {"nvmlDeviceGetMemoryInfo",
            Bind(state->library, "nvmlDeviceGetMemoryInfo", &api.memory)},
           {"nvmlDeviceGetPowerUsage",
            Bind(state->library, "nvmlDeviceGetPowerUsage", &api.power_mw)},
       }) {
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", library, "' is not NVML: it has no ", name));
    }
  }
  // No driver, or a driver with no GPU: nothing to sample, not an error.
  if (api.init() != kNvmlSuccess) return std::unique_ptr<GpuTelemetry>();
  state->initialized = true;
  unsigned int count = 0;
  if (api.device_count(&count) != kNvmlSuccess) count = 0;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (api.device_handle(i, &device) == kNvmlSuccess) state->devices.push_back(device);
  }
  if (state->devices.empty()) return std::unique_ptr<GpuTelemetry>();

  const std::string path = out_dir + "/gpu.jsonl";
  state->file = std::fopen(path.c_str(), "a");
  if (state->file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot create '", path, "'"));
  }
  State* raw = state.get();
  state->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<GpuTelemetry>(new GpuTelemetry(std::move(state)));
}

GpuTelemetry::GpuTelemetry(std::unique_ptr<State> state) : state_(std::move(state)) {}

GpuTelemetry::~GpuTelemetry() = default;

int64_t GpuTelemetry::samples_written() const {
  return state_->samples.load(std::memory_order_relaxed);
}

}  // namespace ladder
