#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A 1-D halo exchange with mpi4py and clbuf.mpi: each rank holds N interior cells of a periodic
global field plus HALO halo cells at each end, in one device buffer. The ranks form a ring; each
sends its edge cells (views buf[HALO:2*HALO] and buf[N:N+HALO], no copy) to its neighbours with
sendrecv and receives theirs into its halo views buf[N+HALO:N+2*HALO] and buf[0:HALO]. Every
cell is checked exactly against the global field.

    mpiexec -np 2 env PYTHONPATH=build/python /usr/bin/python3 examples/python/mpi4py_halo.py
"""
import numpy as np
from mpi4py import MPI

import clbuf
import clbuf.mpi

N = 1000  # interior cells a rank
HALO = 4  # halo width in cells

world = MPI.COMM_WORLD
with clbuf.BufferManager() as bm:
    comm = clbuf.mpi.Communicator(bm, world)
    rank, size = comm.rank, comm.size
    left, right = (rank - 1) % size, (rank + 1) % size

    # The global field is f(i) = i * 0.5 + 1 over size * N cells; this rank owns cells
    # [rank * N, rank * N + N). Halo cells start as NaN so a missing exchange shows.
    def field(first, count):
        return (np.arange(first, first + count, dtype=np.float64) % (size * N)) * 0.5 + 1.0

    local = np.full(N + 2 * HALO, np.nan)
    local[HALO:HALO + N] = field(rank * N, N)
    buf = bm.upload_to_device(local)

    # Left edge to the left neighbour, its right edge into my right halo; and the mirror image.
    comm.sendrecv(buf[HALO:2 * HALO], left, buf[N + HALO:N + 2 * HALO], right, tag=1)
    comm.sendrecv(buf[N:N + HALO], right, buf[0:HALO], left, tag=2)

    got = bm.download_from_device(buf)
    expected = field(rank * N - HALO + size * N, N + 2 * HALO)
    ok = got.tobytes() == expected.tobytes()
    if not ok:
        bad = np.flatnonzero(got != expected)
        print(f"rank {rank}: {bad.size} cells differ, first at {bad[0]}", flush=True)
    all_ok = world.allreduce(int(ok), op=MPI.MIN) == 1
    comm.barrier()

if rank == 0:
    print(f"{size} ranks, {N} cells and {HALO} halo cells each: "
          + ("every halo matches its neighbour's edge" if all_ok else "MISMATCH"))
    print("mpi4py halo exchange: " + ("OK" if all_ok else "FAILED"))
if not all_ok:
    raise SystemExit(1)
