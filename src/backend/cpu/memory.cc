// Host memory for the CPU backend: 64-byte aligned (one cache line, one
// AVX-512 vector) and zeroed, so every arena starts in a known state.
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/backend/cpu/cpu_backend.h"

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

}  // namespace ladder
