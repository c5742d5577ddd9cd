// MakeBackend: the one place that turns a device name into a Backend. Code
// outside src/backend/ never names a concrete backend; it asks for one here
// (the commands pass their --device flag through).
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"

namespace ladder {

// The backend for `device`:
//   "cpu"      the CPU backend (src/backend/cpu), always present.
//   "cuda"     the CUDA backend on the first GPU. FailedPrecondition whose
//              one line says why when no GPU is usable (no driver, no
//              device, CUDA not compiled in).
//   "cuda-sim" the CUDA kernels run by the CUDA simulator on the CPU.
//   "auto"     cuda when a GPU is usable and this binary has the CUDA
//              backend, else cpu; prints one line to stderr naming the
//              choice and why (on the first rank of a job only).
// Anything else is InvalidArgument naming the accepted values. The caller
// owns the backend; buffers it allocated may outlive it.
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view device);

}  // namespace ladder
