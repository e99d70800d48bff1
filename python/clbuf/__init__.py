# SPDX-License-Identifier: MIT
"""clbuf: typed, checked host <-> device transfers of numpy arrays over OpenCL.

The Python face of the clbuf C++ library. The classes and functions below come from the private
extension module ``clbuf._clbuf``; ``Error`` is defined here, in Python, and the extension
raises it for every failure.

    import numpy as np
    import clbuf

    with clbuf.BufferManager() as bm:
        data = np.random.rand(1000).astype(np.float32)
        back = bm.download_from_device(bm.upload_to_device(data))
"""

import contextlib as _contextlib
import os as _os
from typing import Iterator as _Iterator

__all__ = [
    "BufferManager",
    "Checkpoint",
    "DeviceBuffer",
    "DeviceGroup",
    "DeviceInfo",
    "Error",
    "Future",
    "MappedArray",
    "Region",
    "ShardedBuffer",
    "ShardedHalo",
    "Tile",
    "__version__",
    "error_name",
    "explain_selection",
    "list_devices",
    "load",
    "plan_tiles",
    "save",
    "stream_tiles",
    "trace",
    "trace_write_errors",
]


class Error(RuntimeError):
    """A failed clbuf operation.

    ``code`` is the OpenCL error code (0 for misuse OpenCL has no code for, such as using a
    cleaned-up BufferManager); ``name`` is its name, e.g. ``"CL_INVALID_VALUE"``; ``str(error)``
    is the whole message, ``"<operation>: <CL_NAME> (<code>): <details>"``, or for code 0
    ``"<operation>: <details>"``. The operation is the call that was made: the method's name
    (``"fill"``, ``"to_pyopencl"``, ``"send"``) or, for the methods of Future, DeviceInfo,
    DeviceGroup, ShardedBuffer, ShardedHalo and clbuf.mpi's Request, Persistent and
    HaloExchange, ``"Class.method"``; wait(), get() and test() raise the failure of the
    operation they wait for, named as that operation.
    """

    def __init__(self, message: str = "", code: int = 0) -> None:
        """An error with its whole message and its OpenCL error code."""
        super().__init__(message)
        self.code: int = code

    @property
    def name(self) -> str:
        """The name of ``code``, e.g. ``"CL_INVALID_VALUE"``."""
        return error_name(self.code)


class Region:
    """A box of ``size`` elements, from ``src_origin`` of an array laid out as ``src_extents`` to
    ``dst_origin`` of one laid out as ``dst_extents``: the C++ ``clbuf::Region``, field for
    field. Each field is a tuple of three element counts, x = column (elements per row), y = row,
    z = slice; pitches follow from the extents. For ``upload_rect`` the host array is the source,
    for ``download_rect`` the destination."""

    __slots__ = ("size", "src_origin", "src_extents", "dst_origin", "dst_extents")

    def __init__(self, size=(1, 1, 1), src_origin=(0, 0, 0), src_extents=(1, 1, 1),
                 dst_origin=(0, 0, 0), dst_extents=(1, 1, 1)):
        """A box of ``size`` elements between the two layouts; each argument three counts."""
        self.size = tuple(size)
        self.src_origin = tuple(src_origin)
        self.src_extents = tuple(src_extents)
        self.dst_origin = tuple(dst_origin)
        self.dst_extents = tuple(dst_extents)

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"clbuf.Region({fields})"

    def __eq__(self, other):
        return isinstance(other, Region) and all(
            getattr(self, name) == getattr(other, name) for name in self.__slots__)


@_contextlib.contextmanager
def trace(path: "str | _os.PathLike[str]") -> "_Iterator[None]":
    """Traces every BufferManager made inside the ``with`` block into ``path``.

    The file is the Chrome Trace Event Format (JSON) that https://ui.perfetto.dev and
    chrome://tracing open: a span per call with its bytes and path, staging chunks, buffered
    writes, pinned memory (docs/performance.md "Tracing"). It is the C++ ``CLBUF_TRACE``, for a
    block of a program::

        with clbuf.trace("timeline.json"):
            with clbuf.BufferManager() as bm:
                bm.download_from_device(bm.upload_to_device(data))

    A manager is traced when it is made inside the block (tracing is decided at construction):
    managers made before it are not, and a manager made inside keeps tracing into ``path`` until
    it is closed, after the block too. The block is process-wide (managers made by other threads
    meanwhile are traced too) and wins over ``CLBUF_TRACE``; an inner block wins over an outer
    one until it ends. Leaving the block writes every trace file's buffered events out, so the
    file is whole (valid JSON) then; the last manager's close writes the rest. Under an MPI
    launcher each rank writes its own file, the rank in its name (``t.json`` ->
    ``t.rank0.json``; scripts/trace_merge.py merges them). A path that cannot be written (a
    folder, a missing or read-only folder, a FIFO, a full device such as /dev/full) makes each
    manager made inside the block raise clbuf.Error (CL_INVALID_VALUE) naming the path; an empty
    path or one holding a NUL is that error at once, when the block is entered. Every spelling of
    one file (``./t.json``, an absolute path, a symlink, a hard link) is one file, shared by its
    managers. The file is valid JSON at every instant, even when the process is killed; a write
    that fails later (a full disk, ``ulimit -f``) ends the file's writing, prints one line on
    stderr and is listed by :func:`trace_write_errors`, and never fails a transfer.
    """
    previous = _trace_enter(_os.fspath(path))
    try:
        yield
    finally:
        _trace_scope(previous)


# After Error: the extension looks it up in this module when it is imported.
from ._clbuf import (  # noqa: E402
    BufferManager,
    Checkpoint,
    DeviceBuffer,
    DeviceGroup,
    DeviceInfo,
    Future,
    ShardedBuffer,
    ShardedHalo,
    Tile,
    __version__,
    error_name,
    explain_selection,
    list_devices,
    load,
    plan_tiles,
    save,
    stream_tiles,
    _trace_enter,
    _trace_scope,
    trace_write_errors,
)
from ._mapping import MappedArray  # noqa: E402
