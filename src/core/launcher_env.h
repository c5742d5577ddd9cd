// What the job launcher tells a process through its environment, readable
// before MPI starts (and without MPI at all).
#pragma once

namespace ladder {

// True unless the launcher (Open MPI, PMIx, MPICH/Intel MPI, Slurm) says this
// process is not rank 0 of its job; true outside a job. Lets start-up
// messages that every rank would print alike come from the first rank only.
bool IsFirstLaunchedRank();

}  // namespace ladder
