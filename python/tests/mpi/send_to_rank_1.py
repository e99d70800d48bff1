# SPDX-License-Identifier: MIT
"""Rank 0 sends device buffers of fresh random bytes to rank 1 through clbuf.mpi; rank 1 checks
them byte for byte. Run under `mpirun -np 2` by python.pip_install on the package pip built
(python/test_install.cmake), which must have clbuf.mpi and come from CLBUF_EXPECT_LOCATION.
Rank 1 prints "clbuf.mpi: rank 0 -> rank 1 exact" at the end."""
import os
import pathlib
import sys

import numpy as np
from mpi4py import MPI

import clbuf
import clbuf.mpi


def main():
    world = MPI.COMM_WORLD
    location = os.environ.get("CLBUF_EXPECT_LOCATION")
    if location and pathlib.Path(location).resolve() not in pathlib.Path(clbuf.__file__).parents:
        sys.exit(f"clbuf imported from {clbuf.__file__}, not from {location}")
    if not clbuf.mpi.BUILT:
        sys.exit("this clbuf extension was built without MPI")
    if world.Get_size() != 2:
        sys.exit("needs exactly 2 ranks: mpirun -np 2")
    seed = world.bcast(int.from_bytes(os.urandom(8), "little") if world.Get_rank() == 0 else None)
    rng = np.random.default_rng(seed)
    bm = clbuf.BufferManager()
    comm = clbuf.mpi.Communicator(bm, world)
    # 4 B, one byte past 1 MiB, and past several of clbuf.mpi's chunks of 4 MiB.
    for nbytes in (4, (1 << 20) + 1, (9 << 20) + 3):
        data = rng.integers(1, 256, nbytes, dtype=np.uint8)
        if comm.rank == 0:
            comm.send(bm.upload_to_device(data), 1, tag=nbytes % 1000)
        else:
            into = bm.empty(nbytes, np.uint8)
            comm.recv(into, 0, tag=nbytes % 1000)
            if bm.download_from_device(into).tobytes() != data.tobytes():
                sys.exit(f"rank 1 received other bytes than rank 0 sent ({nbytes} bytes)")
    comm.barrier()
    if comm.rank == 1:
        print("clbuf.mpi: rank 0 -> rank 1 exact", flush=True)
    bm.cleanup()


if __name__ == "__main__":
    main()
