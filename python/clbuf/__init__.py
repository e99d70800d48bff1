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

__all__ = [
    "BufferManager",
    "DeviceBuffer",
    "DeviceInfo",
    "Error",
    "Future",
    "__version__",
    "error_name",
    "list_devices",
]


class Error(RuntimeError):
    """A failed clbuf operation.

    ``code`` is the OpenCL error code (0 for misuse OpenCL has no code for, such as using a
    cleaned-up BufferManager); ``name`` is its name, e.g. ``"CL_INVALID_VALUE"``; ``str(error)``
    is the whole message, ``"<operation>: <CL_NAME> (<code>): <details>"``.
    """

    def __init__(self, message: str = "", code: int = 0) -> None:
        super().__init__(message)
        self.code: int = code

    @property
    def name(self) -> str:
        """The name of ``code``, e.g. ``"CL_INVALID_VALUE"``."""
        return error_name(self.code)


# After Error: the extension looks it up in this module when it is imported.
from ._clbuf import (  # noqa: E402
    BufferManager,
    DeviceBuffer,
    DeviceInfo,
    Future,
    __version__,
    error_name,
    list_devices,
)

for _cls in (BufferManager, DeviceBuffer, DeviceInfo, Future):
    _cls.__module__ = __name__
del _cls
