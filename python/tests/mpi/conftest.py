# SPDX-License-Identifier: MIT
"""The MPI tests' shared fixture: a manager and a clbuf.mpi.Communicator on MPI.COMM_WORLD, once
per test module (the modules themselves skip without mpi4py or an MPI build)."""
import pytest


@pytest.fixture(scope="module")
def world():
    """(BufferManager, Communicator); skips below 2 ranks, a barrier at the module's end."""
    from mpi4py import MPI

    import clbuf
    import clbuf.mpi

    bm = clbuf.BufferManager()
    comm = clbuf.mpi.Communicator(bm, MPI.COMM_WORLD)
    if comm.size < 2:
        pytest.skip("needs 2 ranks: mpirun -np 2")
    yield bm, comm
    comm.barrier()
