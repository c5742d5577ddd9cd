// NCCL: communicators on GPU buffers (CUDA builds only).
//
// One NCCL communicator per axis, bootstrapped over the host communicator of
// the same group: group rank 0 draws the unique id, the host communicator
// broadcasts it, every member joins. The host side (MPI) stays the control
// plane; NCCL moves the tensors GPU to GPU.
//
// Operations are enqueued on the stream given at creation, in stream order
// with the kernels before them, and each call returns once its operation has
// finished on the GPU (comm.h's contract). StartAllReduce is the exception:
// it enqueues on the communicator's own side stream, after an event that
// orders it behind the kernels enqueued so far, and returns at once, so the
// kernels enqueued next (the rest of the backward) run while it reduces;
// its PendingOp polls the side stream's event. The communicator is created
// non-blocking (ncclConfig_t::blocking = 0), so no NCCL call can block the
// host: initialization and every operation are polled
// (ncclCommGetAsyncError, cudaStreamQuery) under the Watchdog, which on a
// timeout aborts the NCCL communicator (ncclCommAbort, freeing the GPU
// side) before it ends the job.
//
// Determinism: NCCL's ring and tree all-reduces compute each element on one
// rank and copy it to the others (same bits everywhere); which algorithm
// runs is fixed by the group size, message size, topology and NCCL_ALGO, so a
// rerun on the same machines reduces in the same order.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/status/statusor.h"
#include "src/parallel/comm.h"

namespace ladder {

// The NCCL communicator of `host`'s group and axis (collective over the
// group, like its creation). `host` must be a communicator on host buffers
// (MPI, or the SelfCommunicator of a group of one); it is used only during
// this call. Uses the calling thread's current CUDA device; buffers must be
// CUDA tensors on it. timeout_seconds as in comm.h.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Communicator& host,
                                                                     cudaStream_t stream,
                                                                     double timeout_seconds);

}  // namespace ladder
