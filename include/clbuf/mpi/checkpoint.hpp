// SPDX-License-Identifier: MIT
// clbuf::Checkpoint over the ranks of a Communicator (checkpoint.hpp has the protocol): every
// rank writes its own files and manifest into the shared folder DIR.tmp; the checkpoint becomes
// DIR only once every rank has finished (the collective commit: an MPI_Allreduce over whether
// each rank succeeded, then rank 0's renames, then another over how they went), and a restart
// on the same number of ranks reads each rank's own part back (a rank count that differs is
// refused, naming both). DIR must be on a file system every rank sees.
#ifndef CLBUF_MPI_CHECKPOINT_HPP
#define CLBUF_MPI_CHECKPOINT_HPP

#include <mpi.h>

#include <clbuf/checkpoint.hpp>
#include <clbuf/mpi/communicator.hpp>

namespace clbuf {
namespace mpi {

/// The ranks of `comm` as a Checkpoint's (its all_ok is an MPI_Allreduce on comm's duplicated
/// communicator, so it is collective over them). `comm` must outlive the Checkpoint.
inline CheckpointRanks checkpoint_ranks(const Communicator& comm) {
  CheckpointRanks ranks;
  ranks.rank = comm.rank();
  ranks.size = comm.size();
  MPI_Comm native = comm.native();
  ranks.all_ok = [native](bool ok) {
    int mine = ok ? 1 : 0;
    int all = 0;
    const int err = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, native);
    if (err != MPI_SUCCESS) {
      clbuf::detail::fail("Checkpoint", CL_INVALID_OPERATION, "MPI_Allreduce failed");
    }
    return all == 1;
  };
  return ranks;
}

}  // namespace mpi
}  // namespace clbuf

#endif  // CLBUF_MPI_CHECKPOINT_HPP
