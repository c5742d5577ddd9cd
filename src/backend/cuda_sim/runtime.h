// The CUDA simulator's runtime: the subset of the CUDA runtime API that ladder
// uses, implemented on the CPU, so that kernels/*.cu (compiled by g++ with
// -DLADDER_CUDA_SIM against include/cuda_runtime.h) run unchanged in every
// build and in CI, where no GPU exists. device.h has the device side (thread
// indices, barriers, warp collectives). This header is the contract.
//
// What it promises:
//  - Device memory is host memory, one mapping per cudaMalloc, bounds-checked:
//    the allocation ends flush against an inaccessible guard page (after
//    rounding its size up to 16 bytes, the alignment vector loads need), so an
//    access past the end faults; the fault stops the kernel and the launch
//    returns cudaErrorIllegalAddress, whose cudaGetErrorString names the
//    kernel (with template arguments), the block and thread indices, read or
//    write, and how far past which allocation. A write into the (< 16-byte)
//    rounding slack is caught after the launch, without the thread. New
//    allocations are filled with 0xff bytes (NaN as floats, -1 as integers),
//    as a GPU hands out garbage: a read of memory nothing wrote shows up.
//  - Every pointer argument of a launch must be null or point into a live
//    device allocation (a host pointer handed to a kernel is an error, not a
//    silent success); copies check that their device side lies inside one
//    allocation.
//  - Launches run the whole grid before returning (blocks one after another,
//    in blockIdx order); within a block every thread is a fiber, so
//    __syncthreads and the warp collectives synchronize exactly as on a GPU
//    (see device.h for what is checked). Streams and events keep their order
//    trivially: each operation completes before the call returns.
//  - Launch limits are an H100/H200's: at most 1024 threads per block, grid
//    y and z at most 65535, 48 KiB of dynamic shared memory unless raised by
//    cudaFuncSetAttribute(..., cudaFuncAttributeMaxDynamicSharedMemorySize, n)
//    up to 227 KiB.
//  - Errors follow CUDA: an invalid argument or launch configuration is
//    returned (and kept as the last error until cudaGetLastError clears it); a
//    fault inside a kernel (illegal address, a broken barrier or warp
//    collective, __trap) is sticky: every later call returns it until
//    cudaDeviceReset, which also frees every allocation.
//  - Stream capture and graphs (graph.cc), as in cudaStreamCaptureModeGlobal:
//    between cudaStreamBeginCapture and cudaStreamEndCapture the launches,
//    async copies, memsets and event records enqueued on the capturing
//    stream (and cuBLASLt matmuls on it) are recorded, not run; a
//    cudaGraphExec_t runs them again, in order, on each cudaGraphLaunch
//    (pointer arguments are checked then, so a graph replayed after its
//    memory was freed fails as a GPU would fault). While a capture is active,
//    the calls CUDA forbids in that mode fail and invalidate the capture:
//    cudaMalloc, cudaFree, synchronous copies and memsets, copies between
//    host and device (a GPU allows pinned host memory; the simulator does not
//    tell it apart), any synchronize, work on the legacy stream, reading an
//    event recorded in the capture. The capture's cudaStreamEndCapture then
//    returns cudaErrorStreamCaptureInvalidated naming the call. Only
//    single-stream captures: a fork into the capture through
//    an event is refused.
//
// What it cannot show: timing, the memory model (races between threads that
// a barrier would order on a GPU run here in a fixed fiber order), shared
// memory bank conflicts, and real cuBLASLt (see the cuBLASLt stand-in).
//
// Threads: one launch at a time per host thread; the simulator's global state
// (allocations, errors) is guarded, so host threads may call it concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ladder {
namespace cuda_sim {

// ---- types with CUDA's names (include/cuda_runtime.h exports them) ---------

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorAssert = 710,
  cudaErrorIllegalInstruction = 715,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
};
using cudaError_t = cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned x, y, z;
};

struct SimStream;
struct SimEvent;
struct SimGraph;
struct SimGraphExec;
using cudaStream_t = SimStream*;
using cudaEvent_t = SimEvent*;
using cudaGraph_t = SimGraph*;
using cudaGraphExec_t = SimGraphExec*;

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,  // the only mode simulated
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  int major, minor;
  int multiProcessorCount;
  int warpSize;
  int maxThreadsPerBlock;
};

// ---- the runtime API subset --------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);  // plain host memory here
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
// Host wall-clock time between the two records (the simulator's, not a GPU's).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Stream capture and graphs (graph.cc; see the contract above).
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();               // also ends every capture
cudaError_t cudaGetDeviceCount(int* count);  // always 1
cudaError_t cudaSetDevice(int device);       // only device 0
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);

cudaError_t cudaGetLastError();   // returns and clears (a sticky error stays)
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t err);
// For the most recent error of this code: the simulator's full message (which
// kernel, which thread, what went wrong); otherwise CUDA's generic text.
const char* cudaGetErrorString(cudaError_t err);

// ---- launches (called through kernels/launch.cuh) ----------------------------

namespace internal {

// One launch, type-erased: `run(args)` calls the kernel once as the current
// simulated thread.
struct LaunchRequest {
  const char* kernel_name;
  const void* kernel;  // key for cudaFuncSetAttribute
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  const void* const* pointer_args;  // the launch's pointer arguments, in order
  const int* pointer_arg_index;     // their positions in the argument list
  int num_pointer_args;
  void (*run)(void* args);
  void* args;
};
cudaError_t Launch(const LaunchRequest& request);
cudaError_t SetMaxDynamicShared(const void* kernel, int bytes);

// Work enqueued on a stream, as a closure that runs it on the stream given.
using StreamWork = std::function<cudaError_t(cudaStream_t)>;
// Whether any stream is capturing (a cheap check before building a closure).
bool CaptureActive();
// Runs `work` on `stream` now, or records it when the stream is capturing
// (returning cudaSuccess); work on the legacy stream while a capture is
// active fails and invalidates the capture.
cudaError_t Enqueue(cudaStream_t stream, StreamWork work);

// "ladder::kernels::sim::{anonymous}::Foo<float, 4>" -> "Foo<float, 4>", from
// the __PRETTY_FUNCTION__ of RunKernel<kKernel>.
std::string KernelNameFromSignature(const char* pretty_function);

template <typename T>
constexpr bool kIsPointer = std::is_pointer_v<std::decay_t<T>>;

// Runs kKernel on grid x block threads now (LaunchKernel's work).
template <auto kKernel, typename... Args>
cudaError_t RunKernel(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      Args... args) {
  static const std::string name = KernelNameFromSignature(__PRETTY_FUNCTION__);
  std::tuple<Args...> tuple(args...);
  // The pointer arguments and their positions, for the device-memory check.
  constexpr int kNumPointers = (0 + ... + (internal::kIsPointer<Args> ? 1 : 0));
  const void* pointers[kNumPointers + 1] = {};
  int positions[kNumPointers + 1] = {};
  [&]<size_t... I>(std::index_sequence<I...>) {
    int k = 0;
    (
        [&] {
          if constexpr (internal::kIsPointer<std::tuple_element_t<I, std::tuple<Args...>>>) {
            pointers[k] = static_cast<const void*>(std::get<I>(tuple));
            positions[k++] = static_cast<int>(I);
          }
        }(),
        ...);
  }(std::index_sequence_for<Args...>{});
  internal::LaunchRequest request{
      name.c_str(),
      reinterpret_cast<const void*>(kKernel),
      grid,
      block,
      shared_bytes,
      stream,
      pointers,
      positions,
      kNumPointers,
      [](void* p) { std::apply(kKernel, *static_cast<std::tuple<Args...>*>(p)); },
      &tuple};
  return Launch(request);
}

}  // namespace internal

// Runs kKernel on grid x block threads with `shared_bytes` of dynamic shared
// memory; returns when the grid has finished (see the contract above), or,
// on a capturing stream, records the launch with its arguments.
template <auto kKernel, typename... Args>
cudaError_t LaunchKernel(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                         Args... args) {
  if (internal::CaptureActive()) {
    return internal::Enqueue(stream, [=](cudaStream_t s) {
      return internal::RunKernel<kKernel>(grid, block, shared_bytes, s, args...);
    });
  }
  return internal::RunKernel<kKernel>(grid, block, shared_bytes, stream, args...);
}

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return internal::SetMaxDynamicShared(reinterpret_cast<const void*>(kernel), value);
}

// The running block's dynamic shared memory (null outside a kernel).
void* DynamicSharedMemory();

}  // namespace cuda_sim
}  // namespace ladder
