// What the job launcher tells a process through its environment, readable
// before MPI starts (and without MPI at all).
#pragma once

namespace ladder {

// True unless the launcher (Open MPI, PMIx, MPICH/Intel MPI, Slurm) says this
// process is not rank 0 of its job; true outside a job. Lets start-up
// messages that every rank would print alike come from the first rank only.
bool IsFirstLaunchedRank();

// This process's rank among the job's processes on the same machine, as the
// launcher says (Open MPI, MPICH/Intel MPI, Slurm); 0 outside a job or when
// the launcher does not say. A rank computing on a GPU takes GPU
// (local rank mod GPUs), so `mpirun -np 8` on an 8-GPU machine gives each
// rank its own device.
int LaunchedLocalRank();

}  // namespace ladder
