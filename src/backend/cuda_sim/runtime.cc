// The host-side API of the simulator (runtime.h): memory, copies, streams,
// events, the device and the error state. Launches live in scheduler.cc.
#include "src/backend/cuda_sim/runtime.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/backend/cuda_sim/errors.h"
#include "src/backend/cuda_sim/memory.h"
#include "src/backend/cuda_sim/stream.h"

namespace ladder {
namespace cuda_sim {

namespace internal {
namespace {

std::atomic<int> sticky{cudaSuccess};
thread_local cudaError_t last_error = cudaSuccess;
// The full message of the most recent error of each code, per host thread.
thread_local std::map<int, std::string> details;

// The device this simulator claims to be: an H100/H200's limits.
constexpr size_t kDeviceMemory = size_t{80} << 30;
constexpr size_t kSharedPerBlock = 48 * 1024;
constexpr size_t kSharedOptin = 227 * 1024;

}  // namespace

cudaError_t Fail(cudaError_t err, std::string detail, bool sticky_error) {
  details[err] = std::move(detail);
  last_error = err;
  if (sticky_error) {
    int expected = cudaSuccess;
    sticky.compare_exchange_strong(expected, err);
  }
  return err;
}

cudaError_t StickyError() { return static_cast<cudaError_t>(sticky.load()); }

void ClearErrors() {
  sticky.store(cudaSuccess);
  last_error = cudaSuccess;
  details.clear();
}

}  // namespace internal

using internal::Fail;

namespace {

// Every call starts here: a sticky error fails it.
#define RETURN_IF_STICKY()                                           \
  do {                                                               \
    const cudaError_t sticky_err = internal::StickyError();          \
    if (sticky_err != cudaSuccess) return last_error_is(sticky_err); \
  } while (0)

cudaError_t last_error_is(cudaError_t err) {
  internal::last_error = err;
  return err;
}

using internal::ValidEvent;
using internal::ValidStream;

// The calls a capture forbids (stream.h): fail them while one is active.
#define RETURN_IF_CAPTURING(call)                                        \
  do {                                                                   \
    const cudaError_t capture_err = internal::RefuseDuringCapture(call); \
    if (capture_err != cudaSuccess) return capture_err;                  \
  } while (0)

// The direction of a copy: which of dst and src must be device memory.
cudaError_t CheckCopy(const char* what, void* dst, const void* src, size_t bytes,
                      cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) {
    kind = static_cast<cudaMemcpyKind>(
        (internal::IsDeviceRange(src, 0) ? 2 : 0) | (internal::IsDeviceRange(dst, 0) ? 1 : 0));
  }
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (dst_device && !internal::IsDeviceRange(dst, bytes)) {
    return Fail(cudaErrorInvalidValue,
                absl::StrFormat("%s: destination [%p, +%d bytes) is not inside one device "
                                "allocation",
                                what, dst, bytes));
  }
  if (src_device && !internal::IsDeviceRange(src, bytes)) {
    return Fail(cudaErrorInvalidValue,
                absl::StrFormat("%s: source [%p, +%d bytes) is not inside one device allocation",
                                what, src, bytes));
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  RETURN_IF_STICKY();
  RETURN_IF_CAPTURING("cudaMalloc");
  if (ptr == nullptr) return Fail(cudaErrorInvalidValue, "cudaMalloc: null result pointer");
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  *ptr = internal::AllocateDevice(bytes);
  if (*ptr == nullptr) {
    return Fail(cudaErrorMemoryAllocation, absl::StrCat("cudaMalloc: out of memory for ", bytes,
                                                        " bytes"));
  }
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  RETURN_IF_STICKY();
  RETURN_IF_CAPTURING("cudaFree");
  if (ptr == nullptr || internal::FreeDevice(ptr)) return cudaSuccess;
  return Fail(cudaErrorInvalidValue,
              absl::StrFormat("cudaFree: %p is not the start of a device allocation", ptr));
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  *ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  return *ptr == nullptr && bytes != 0 ? Fail(cudaErrorMemoryAllocation, "cudaMallocHost")
                                       : cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  RETURN_IF_STICKY();
  const size_t used = internal::DeviceBytesInUse();
  *total_bytes = internal::kDeviceMemory;
  *free_bytes = used < internal::kDeviceMemory ? internal::kDeviceMemory - used : 0;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  RETURN_IF_STICKY();
  if (!ValidStream(stream)) return Fail(cudaErrorInvalidResourceHandle, "cudaMemcpy: bad stream");
  const cudaError_t err = CheckCopy("cudaMemcpy", dst, src, bytes, kind);
  if (err != cudaSuccess || bytes == 0) return err;
  // A graph cannot hold a copy from or to pageable host memory, and the
  // simulator does not tell pinned host memory from pageable.
  if (stream != nullptr && stream->capturing &&
      !(internal::IsDeviceRange(dst, bytes) && internal::IsDeviceRange(src, bytes))) {
    RETURN_IF_CAPTURING("cudaMemcpyAsync between host and device");
  }
  return internal::Enqueue(stream, [=](cudaStream_t) {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  RETURN_IF_CAPTURING("cudaMemcpy");
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  RETURN_IF_STICKY();
  if (!ValidStream(stream)) return Fail(cudaErrorInvalidResourceHandle, "cudaMemset: bad stream");
  if (bytes == 0) return cudaSuccess;
  if (!internal::IsDeviceRange(dst, bytes)) {
    return Fail(cudaErrorInvalidValue,
                absl::StrFormat("cudaMemset: [%p, +%d bytes) is not inside one device allocation",
                                dst, bytes));
  }
  return internal::Enqueue(stream, [=](cudaStream_t) {
    std::memset(dst, value, bytes);
    return cudaSuccess;
  });
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  RETURN_IF_CAPTURING("cudaMemset");
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  RETURN_IF_STICKY();
  *stream = new SimStream;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || !ValidStream(stream)) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: bad stream");
  }
  stream->magic = 0;
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  RETURN_IF_STICKY();
  if (!ValidStream(stream)) return Fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize");
  // The legacy stream synchronizes with every stream, a capturing one too.
  if (stream == nullptr || stream->capturing) RETURN_IF_CAPTURING("cudaStreamSynchronize");
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned /*flags*/) {
  RETURN_IF_STICKY();
  if (!ValidStream(stream) || !ValidEvent(event)) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: bad stream or event");
  }
  // Waiting on an event of a capture joins the waiter into it (a fork),
  // which the simulator's single-stream captures do not model.
  if (event->captured && (stream == nullptr || !stream->capturing)) {
    RETURN_IF_CAPTURING("cudaStreamWaitEvent on an event recorded in a capture");
  }
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  RETURN_IF_STICKY();
  *event = new SimEvent;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!ValidEvent(event)) return Fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy");
  event->magic = 0;
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  RETURN_IF_STICKY();
  if (!ValidEvent(event) || !ValidStream(stream)) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: bad event or stream");
  }
  // In a capture the record marks a point of the capture (for other
  // streams to join), not a node of the graph: the event is not readable.
  if (stream != nullptr && stream->capturing) {
    event->captured = true;
    return cudaSuccess;
  }
  if (stream == nullptr) RETURN_IF_CAPTURING("cudaEventRecord on the legacy default stream");
  event->captured = false;
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  return cudaSuccess;
}

// An event last recorded inside a capture cannot be waited for or timed.
cudaError_t CheckNotCaptured(cudaEvent_t event, const char* call) {
  if (!event->captured) return cudaSuccess;
  internal::RefuseDuringCapture(call);
  return Fail(cudaErrorCapturedEvent,
              absl::StrCat(call, ": the event was last recorded inside a stream capture"));
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  RETURN_IF_STICKY();
  if (!ValidEvent(event)) return Fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize");
  return CheckNotCaptured(event, "cudaEventSynchronize");
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  RETURN_IF_STICKY();
  if (!ValidEvent(start) || !ValidEvent(end)) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: bad event");
  }
  for (cudaEvent_t e : {start, end}) {
    const cudaError_t err = CheckNotCaptured(e, "cudaEventElapsedTime");
    if (err != cudaSuccess) return err;
  }
  if (!start->recorded || !end->recorded) {
    return Fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event not recorded");
  }
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  RETURN_IF_STICKY();
  RETURN_IF_CAPTURING("cudaDeviceSynchronize");
  return cudaSuccess;
}

cudaError_t cudaDeviceReset() {
  internal::EndAllCaptures();
  internal::FreeAllDevice();
  internal::ClearErrors();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  RETURN_IF_STICKY();
  return device == 0 ? cudaSuccess
                     : Fail(cudaErrorInvalidDevice,
                            absl::StrCat("cudaSetDevice(", device, "): the simulator is device 0"));
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  *prop = {};
  std::strncpy(prop->name, "ladder CUDA simulator", sizeof(prop->name) - 1);
  prop->totalGlobalMem = internal::kDeviceMemory;
  prop->sharedMemPerBlock = internal::kSharedPerBlock;
  prop->sharedMemPerBlockOptin = internal::kSharedOptin;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t err = internal::last_error;
  const cudaError_t sticky_err = internal::StickyError();
  internal::last_error = sticky_err;
  return err != cudaSuccess ? err : sticky_err;
}

cudaError_t cudaPeekAtLastError() {
  return internal::last_error != cudaSuccess ? internal::last_error : internal::StickyError();
}

const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorIllegalInstruction: return "cudaErrorIllegalInstruction";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent:
      return "cudaErrorCapturedEvent";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t err) {
  auto it = internal::details.find(err);
  if (it != internal::details.end()) return it->second.c_str();
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorIllegalState:
      return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a capturing stream";
  }
  return "unknown error";
}

}  // namespace cuda_sim
}  // namespace ladder
