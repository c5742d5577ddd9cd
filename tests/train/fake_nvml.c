/* A fake NVML for the GPU telemetry tests: the entry points ladder uses,
 * with NVML's signatures, answering scripted values.
 *
 *   FAKE_NVML_DEVICES=N   how many GPUs it reports (default 2)
 *   FAKE_NVML_INIT_FAIL=1 nvmlInit_v2 fails as with no driver loaded
 *
 * GPU i reports utilization 50 + 10 i percent, (i + 1) GiB of 80 GiB used and
 * 300 + 25 i watts; GPU 1's power reading is "not supported", as on some
 * boards. fake_nvml_active() is 1 between nvmlInit_v2 and nvmlShutdown. */
#include <stdlib.h>

typedef int nvmlReturn_t;
enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_DRIVER_NOT_LOADED = 9 };
typedef struct nvmlDevice_st { unsigned int index; } *nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

#define MAX_DEVICES 8
static struct nvmlDevice_st devices[MAX_DEVICES] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int active = 0;

static unsigned int DeviceCount(void) {
  const char* s = getenv("FAKE_NVML_DEVICES");
  const int n = s ? atoi(s) : 2;
  return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : (unsigned int)n;
}

int fake_nvml_active(void) { return active; }

nvmlReturn_t nvmlInit_v2(void) {
  const char* fail = getenv("FAKE_NVML_INIT_FAIL");
  if (fail && fail[0] == '1') return NVML_ERROR_DRIVER_NOT_LOADED;
  active = 1;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  active = 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = DeviceCount();
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index >= DeviceCount()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  utilization->gpu = 50 + 10 * device->index;
  utilization->memory = 20;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  const unsigned long long gib = 1ull << 30;
  memory->total = 80 * gib;
  memory->used = (device->index + 1) * gib;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  if (device->index == 1) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = 300000 + 25000 * device->index;
  return NVML_SUCCESS;
}
