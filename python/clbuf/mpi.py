# SPDX-License-Identifier: MIT
"""clbuf.mpi: MPI transfers of clbuf DeviceBuffers between ranks, over the C++ clbuf::mpi.

    from mpi4py import MPI
    import clbuf, clbuf.mpi

    bm = clbuf.BufferManager()
    comm = clbuf.mpi.Communicator(bm, MPI.COMM_WORLD)

Needs mpi4py and an extension built with MPI (CMake or pip where MPI is found); otherwise
Communicator() raises clbuf.Error.
"""
from . import Error
from . import _clbuf

__all__ = ["Communicator", "Request"]

if hasattr(_clbuf, "_MpiCommunicator"):
    Request = _clbuf._MpiRequest

    def Communicator(bm, comm=None):  # noqa: N802 (a class to its users)
        """A clbuf.mpi communicator for ``bm`` on the mpi4py communicator ``comm``
        (default ``MPI.COMM_WORLD``): duplicated, collective over ``comm``."""
        try:
            from mpi4py import MPI
        except ImportError as error:
            raise Error(f"Communicator: CL_INVALID_OPERATION (-59): needs mpi4py, which cannot "
                        f"be imported ({error}); Debian: apt install python3-mpi4py",
                        -59) from None
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Comm):
            raise Error(f"Communicator: CL_INVALID_VALUE (-30): comm must be an mpi4py.MPI.Comm, "
                        f"not {type(comm).__name__}", -30)
        return _clbuf._MpiCommunicator(bm, MPI._handleof(comm))
else:
    class Request:  # noqa: D101
        pass

    def Communicator(bm, comm=None):  # noqa: N802
        raise Error("Communicator: CL_INVALID_OPERATION (-59): this clbuf extension was built "
                    "without MPI (CMake builds clbuf.mpi where it finds MPI, CLBUF_BUILD_MPI; pip "
                    "builds without it)", -59)
