// Host memory for the CPU backend: 64-byte aligned (one cache line, one
// AVX-512 vector) and zeroed, so every arena starts in a known state; and
// Copy between two of its tensors.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"
#include "src/backend/shape_check.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<DeviceBuffer> CpuBackend::Allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  std::memset(p, 0, rounded);
  const int64_t size = static_cast<int64_t>(rounded == 0 ? 64 : rounded);
  *allocated_ += size;
  return DeviceBuffer(p, [counter = allocated_, size](void* q) {
    std::free(q);
    *counter -= size;
  });
}

absl::Status CpuBackend::Copy(Tensor dst, Tensor src) {
  RETURN_IF_ERROR(CheckCopy(Device::kCpu, "Copy", dst, src));
  // In chunks across the threads: one core alone cannot draw the memory's
  // bandwidth (bench ops measures its copy floor with this op).
  constexpr int64_t kChunk = int64_t{1} << 20;
  const int64_t bytes = static_cast<int64_t>(dst.bytes());
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  char* d = static_cast<char*>(dst.data);
  const char* s = static_cast<const char*>(src.data);
#pragma omp parallel for schedule(static) if (chunks >= 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    std::memcpy(d + begin, s + begin, static_cast<size_t>(std::min(kChunk, bytes - begin)));
  }
  return absl::OkStatus();
}

}  // namespace ladder
