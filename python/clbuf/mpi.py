# SPDX-License-Identifier: MIT
"""clbuf.mpi: MPI transfers of clbuf DeviceBuffers between ranks, over the C++ clbuf::mpi.

    from mpi4py import MPI
    import clbuf, clbuf.mpi

    bm = clbuf.BufferManager()
    comm = clbuf.mpi.Communicator(bm, MPI.COMM_WORLD)

Point-to-point (send, recv, sendrecv, isend, irecv, send_init, recv_init), collectives
(broadcast, ibroadcast, allreduce, iallreduce, scatter, gather, barrier) and halo exchanges
(HaloExchange with a plan of Neighbours, or cartesian_faces on an mpi4py Cartcomm).

Needs mpi4py and an extension built with MPI (CMake or pip where MPI is found); otherwise
Communicator() raises clbuf.Error saying how to get it (``BUILT`` says which).
"""
from . import Error
from . import _clbuf

__all__ = ["BUILT", "Box", "Communicator", "HaloExchange", "Neighbour", "Persistent", "Request",
           "cartesian_faces", "PROC_NULL", "ANY_SOURCE", "ANY_TAG"]


#: Whether this extension was built with MPI (clbuf.mpi works only then).
BUILT = hasattr(_clbuf, "_MpiCommunicator")

# How to get an extension with MPI, for the error of an extension without it and `clbuf info`.
HOW_TO_BUILD = (
    "install MPI's development files and mpi4py (Debian: apt install libopenmpi-dev "
    "python3-mpi4py; or set MPICC to an MPI compiler wrapper; pip install 'clbuf[mpi]' adds "
    "mpi4py), then reinstall clbuf: pip install --no-build-isolation --force-reinstall . "
    "(pip install -v shows 'clbuf: building clbuf.mpi with MPI from ...'); CMake builds it "
    "where it finds MPI (CLBUF_BUILD_MPI)")


def _triple(value):
    try:
        return tuple(value)
    except TypeError:
        return value  # the extension says what is wrong with it


class Box:
    """A box of a field (a face, edge or corner of the local block): ``size`` elements (x per
    row, y rows, z slices) from ``origin`` of a field laid out as ``field``, x fastest: the C++
    ``clbuf::mpi::Box``. Each is a tuple of three element counts; a 2-D field has field z = 1."""

    __slots__ = ("origin", "size", "field")

    def __init__(self, origin=(0, 0, 0), size=(1, 1, 1), field=(1, 1, 1)):
        """A box of ``size`` elements at ``origin`` of a field laid out as ``field``."""
        self.origin = _triple(origin)
        self.size = _triple(size)
        self.field = _triple(field)

    def __repr__(self):
        return f"clbuf.mpi.Box(origin={self.origin!r}, size={self.size!r}, field={self.field!r})"

    def __eq__(self, other):
        return isinstance(other, Box) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__)


class Neighbour:
    """One neighbour of a HaloExchange, the C++ ``clbuf::mpi::Neighbour``: ``count`` elements at
    ``send_offset`` of the field go to ``rank`` with ``send_tag``; ``count`` elements from it,
    sent with ``recv_tag``, land at ``recv_offset``. ``send_box`` / ``recv_box`` (a Box) replace
    that direction's range by a strided box packed (unpacked) on the device. ``rank`` may be
    ``PROC_NULL`` (a closed boundary: nothing moves)."""

    __slots__ = ("rank", "send_offset", "recv_offset", "count", "send_tag", "recv_tag",
                 "send_box", "recv_box")

    def __init__(self, rank, send_offset=0, recv_offset=0, count=0, send_tag=0, recv_tag=0,
                 send_box=None, recv_box=None):
        """The neighbour ``rank``, its ranges (or boxes) of the field and its tags."""
        self.rank = rank
        self.send_offset = send_offset
        self.recv_offset = recv_offset
        self.count = count
        self.send_tag = send_tag
        self.recv_tag = recv_tag
        self.send_box = send_box
        self.recv_box = recv_box

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"clbuf.mpi.Neighbour({fields})"

    def __eq__(self, other):
        return isinstance(other, Neighbour) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__)


def _mpi4py(operation):
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise Error(f"{operation}: CL_INVALID_OPERATION (-59): needs mpi4py, which cannot "
                    f"be imported ({error}); Debian: apt install python3-mpi4py",
                    -59) from None
    return MPI


def _handle(operation, MPI, comm, what="comm"):  # noqa: N803
    if not isinstance(comm, MPI.Comm):
        raise Error(f"{operation}: CL_INVALID_VALUE (-30): {what} must be an mpi4py.MPI.Comm, "
                    f"not {type(comm).__name__}", -30)
    return MPI._handleof(comm)


if BUILT:
    Communicator = _clbuf._MpiCommunicator
    Request = _clbuf._MpiRequest
    Persistent = _clbuf._MpiPersistent
    HaloExchange = _clbuf._MpiHaloExchange
    _constants = _clbuf._mpi_constants()
    PROC_NULL = _constants["PROC_NULL"]
    ANY_SOURCE = _constants["ANY_SOURCE"]
    ANY_TAG = _constants["ANY_TAG"]
    del _constants

    def _check_constants(MPI):  # noqa: N803
        """mpi4py's MPI.PROC_NULL, ANY_SOURCE and ANY_TAG pass through as ints: they must be the
        values of the MPI library this extension was built with."""
        ours = (PROC_NULL, ANY_SOURCE, ANY_TAG)
        theirs = (MPI.PROC_NULL, MPI.ANY_SOURCE, MPI.ANY_TAG)
        if ours != theirs:
            raise Error("Communicator: CL_INVALID_OPERATION (-59): mpi4py's PROC_NULL, "
                        f"ANY_SOURCE, ANY_TAG {theirs} differ from clbuf's {ours}: mpi4py and "
                        "clbuf were built against different MPI libraries", -59)

    def _comm_handle(operation, comm):
        """The MPI_Comm of the mpi4py communicator ``comm`` (None: ``MPI.COMM_WORLD``) as an int,
        for Communicator(); clbuf.Error where mpi4py is missing, ``comm`` is not an mpi4py
        communicator, or mpi4py's MPI library is not this extension's."""
        MPI = _mpi4py(operation)  # noqa: N806
        if comm is None:
            comm = MPI.COMM_WORLD
        handle = _handle(operation, MPI, comm)
        _check_constants(MPI)
        return handle

    def cartesian_faces(cartcomm, interior, halo, edges_and_corners=False, first_tag=0):
        """The HaloExchange plan (a list of Neighbour) of the local block of a grid decomposed
        over ``cartcomm`` (an mpi4py Cartcomm of 1, 2 or 3 dimensions; dimension 0 is x): the
        field holds ``interior`` (nx, ny, nz; fewer are padded with 1) with ``halo`` ghost cells
        on both sides of every decomposed axis, x fastest. One Neighbour a face, and with
        ``edges_and_corners`` an edge and corner too; periodic or closed (PROC_NULL) by the
        communicator's periods. Exchange on a Communicator made on ``cartcomm``."""
        MPI = _mpi4py("cartesian_faces")  # noqa: N806
        handle = _handle("cartesian_faces", MPI, cartcomm, "cartcomm")
        try:
            interior = tuple(interior)
        except TypeError:
            interior = (interior,)
        if 1 <= len(interior) < 3:
            interior = interior + (1,) * (3 - len(interior))
        if not isinstance(edges_and_corners, bool):
            raise Error("cartesian_faces: CL_INVALID_VALUE (-30): edges_and_corners must be a "
                        f"bool, not {type(edges_and_corners).__name__}", -30)
        plan = _clbuf._mpi_cartesian_faces(handle, interior, halo, edges_and_corners,
                                           first_tag)
        return [Neighbour(rank, send_offset, recv_offset, count, send_tag, recv_tag,
                          None if send_box is None else Box(*send_box),
                          None if recv_box is None else Box(*recv_box))
                for (rank, send_offset, recv_offset, count, send_tag, recv_tag, send_box,
                     recv_box) in plan]
else:
    PROC_NULL = ANY_SOURCE = ANY_TAG = None

    def _unbuilt(name):
        raise Error(f"{name}: CL_INVALID_OPERATION (-59): this clbuf extension was built "
                    f"without MPI, as no MPI was found when it was built; for clbuf.mpi "
                    f"{HOW_TO_BUILD}", -59)

    class Communicator:
        """DeviceBuffers between MPI ranks. This extension was built without MPI: making one
        raises clbuf.Error saying how to get an extension with it."""

        def __init__(self, bm, comm=None, *, chunk_bytes=None, depth=None, path=None,
                     device_reduce_bytes=None, verify_collectives=None):
            """Raises clbuf.Error: this extension was built without MPI."""
            _unbuilt("Communicator")

    class Request:
        """An isend, irecv, ibroadcast or iallreduce in flight (none without MPI)."""

    class Persistent:
        """A send_init or recv_init (none without MPI)."""

    class HaloExchange:
        """A persistent halo exchange of one field. This extension was built without MPI:
        making one raises clbuf.Error."""

        def __init__(self, comm, plan, *, dtype=None):
            """Raises clbuf.Error: this extension was built without MPI."""
            _unbuilt("HaloExchange")

    def cartesian_faces(cartcomm, interior, halo, edges_and_corners=False, first_tag=0):
        """The HaloExchange plan of a Cartesian grid's local block. This extension was built
        without MPI: raises clbuf.Error."""
        _unbuilt("cartesian_faces")
