// MPI: the process-wide runtime, and communicators on host buffers.
//
// One binary serves both kinds of launch. Under an MPI launcher (mpirun,
// srun) MpiRuntime::Init initializes MPI; started plainly it leaves MPI alone
// and the process is rank 0 of a world of 1. (Open MPI 4.1 can initialize a
// "singleton" without mpirun, but it forks a helper daemon and costs about
// half a second per start; a one-process run needs no MPI at all, and every
// group of one is a SelfCommunicator.)
//
// Communicators are built per axis from the member list of a Grid group with
// MPI_Comm_create_group, which is collective over the members only. Every
// rank creates its groups in the same axis order, so no two groups wait on
// each other.
//
// Every operation is issued non-blocking (MPI_Iallreduce, MPI_Isend, ...)
// and completed by polling MPI_Test under a Watchdog (watchdog.h): the hang
// timeout, and sleeps that keep waiting ranks off the CPU when ranks
// outnumber cores (docs/ARCHITECTURE.md has the measurement). libnbc, Open
// MPI's non-blocking collectives, advances a collective's rounds only inside
// MPI_Test, so the watchdog's sleep cap bounds the latency added per round.
//
// Determinism: Open MPI's non-blocking all-reduce (coll/libnbc) picks its
// algorithm from the group size, element count, dtype and in-place-ness
// only, never from timing. Each of its algorithms computes every element of
// the result once (binomial: reduced up a fixed tree to group rank 0, then
// broadcast; ring and Rabenseifner: each block summed by its owner, then
// gathered) and copies it to the others, so all members hold the same bits,
// and the same bits on every run. This communicator always reduces in place,
// where libnbc uses the binomial tree. tests/parallel checks both claims.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/parallel/comm.h"
#include "src/parallel/grid.h"

namespace ladder {

class MpiRuntime {
 public:
  // Call once, first thing in main. If the environment shows an MPI launcher
  // (OMPI_COMM_WORLD_SIZE from Open MPI's mpirun, PMIX_RANK from srun with
  // PMIx, PMI_RANK from MPICH's Hydra), initializes MPI with
  // MPI_THREAD_FUNNELED (only the main thread calls MPI; OpenMP threads never
  // do) and errors returned as codes. Otherwise does nothing. A second call
  // is FailedPrecondition.
  static absl::Status Init(int* argc, char*** argv);
  // True when Init initialized MPI (the process was launched by MPI).
  static bool active();
  // 1 and 0 when not active.
  static int world_size();
  static int world_rank();
  // Shuts MPI down (no-op when not active). Destroy every communicator
  // first. A launched rank that exits without it makes mpirun report the job
  // as failed.
  static void Finalize();
  // Ends the whole job with `code`: MPI_Abort on the world when active (mpirun
  // then kills every rank and exits with `code`), else this process exits.
  [[noreturn]] static void Abort(int code);
};

// MPI counts are ints. Send, Recv, SendRecv and Broadcast move buffers of
// any size (past INT_MAX elements as one element of a derived type); the
// reductions and AllGather refuse more than INT_MAX elements with
// InvalidArgument. Tests lower the limit to exercise the derived types on
// small buffers; not thread-safe, call between operations.
void SetMpiMaxCountForTesting(int64_t max_count);

// A communicator over MPI for the group of world ranks `members` (ascending,
// no repeats, containing this rank; every member passes the same list).
// Collective over the members, blocking, no timeout (creation needs every
// member to have started: CreateHostCommunicators checks that first).
// A list of one gives a SelfCommunicator. timeout_seconds: the hang
// watchdog's limit per call (0 waits forever). FailedPrecondition if MPI is
// not active (and the group is not just this rank).
//
// MPI moves host memory: buffers must be CPU tensors, or tensors on `device`
// when that device's memory is the host's (the CUDA simulator's:
// Backend::memory_is_host). kCpu (the default) means CPU tensors only.
absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(
    Axis axis, const std::vector<int>& members, double timeout_seconds,
    Device device = Device::kCpu);

// Every axis's communicator of this rank of `grid`, in the order world,
// tensor, data, pipeline, embedding: MPI for groups of two or more,
// SelfCommunicator for groups of one, so a single-process run touches no MPI.
// Under MPI it first waits (watched by the timeout) for every rank to arrive,
// so a rank that never starts is named instead of hanging the creation.
// InvalidArgument if the grid's world size or rank differ from MpiRuntime's.
// The communicators carry CPU tensors; a device backend's are added per
// group (RoutedCommunicator, routed_comm.h).
absl::StatusOr<Communicators> CreateHostCommunicators(const Grid& grid, double timeout_seconds);

}  // namespace ladder
