// MakeBackend: the one place that turns a device name into a Backend, and
// MakeDeviceCommunicator, the communicator for its tensors. Code outside
// src/backend/ never names a concrete backend; it asks for one here (the
// commands pass their --device flag through).
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/parallel/comm.h"

namespace ladder {

// The backend for `device`:
//   "cpu"      the CPU backend (src/backend/cpu), always present.
//   "cuda"     the CUDA backend on this rank's GPU (below). FailedPrecondition whose
//              one line says why when no GPU is usable (no driver, no
//              device, CUDA not compiled in).
//   "cuda-sim" the CUDA kernels run by the CUDA simulator on the CPU.
//   "auto"     cuda when a GPU is usable and this binary has the CUDA
//              backend, else cpu; prints one line to stderr naming the
//              choice and why (on the first rank of a job only).
// Anything else is InvalidArgument naming the accepted values. The caller
// owns the backend; buffers it allocated may outlive it.
// On a GPU, rank r of a job takes GPU (local rank mod GPUs) (launcher_env.h).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view device);

// The communicator that carries tensors on `backend`'s device for the group
// of `host` (a host-memory communicator: MPI, or a group of one), of the
// same axis and members. Collective over the group, like `host`, which is
// used only during the call:
//   a device whose memory is the host's (cpu, cuda-sim): MPI over that
//     memory (mpi_comm.h, CreateMpiCommunicator with backend.device());
//   cuda: NCCL on the backend's stream (cuda_backends.h).
// Errors: the carrier's creation error (no MPI, no NCCL in this build, ...).
absl::StatusOr<std::unique_ptr<Communicator>> MakeDeviceCommunicator(const Backend& backend,
                                                                     Communicator& host,
                                                                     double timeout_seconds);

}  // namespace ladder
