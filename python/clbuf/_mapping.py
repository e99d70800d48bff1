# SPDX-License-Identifier: MIT
"""The array of ``with bm.map(buf, mode) as a:`` (clbuf.MappedArray).

The array's memory is owned by its mapping (python/host_memory.hpp): it stays valid as long as
the array, so no use of the array can crash. After the ``with`` block the mapping is closed and
the array refuses every use that goes through it (indexing, arithmetic, numpy functions, repr,
conversion) with clbuf.Error. A plain ndarray made from it (``np.asarray(a)``) bypasses that
check; it then reads memory that is still valid but no longer the device's current contents.
"""
import numpy as np

CL_INVALID_OPERATION = -59


class MappedArray(np.ndarray):
    """A numpy array over a mapped DeviceBuffer; valid inside its ``with bm.map(...)`` block."""

    @classmethod
    def _wrap(cls, array, mapping):
        result = array.view(cls)
        result._clbuf_mapping = mapping
        return result

    def __array_finalize__(self, obj):
        self._clbuf_mapping = getattr(obj, "_clbuf_mapping", None)

    def _clbuf_check(self):
        mapping = self._clbuf_mapping
        if mapping is not None and mapping.closed:
            from . import Error

            raise Error("map: CL_INVALID_OPERATION (-59): the array of a mapping was used after "
                        "its with block ended (the buffer was unmapped at exit); map it again",
                        CL_INVALID_OPERATION)

    @staticmethod
    def _plain(values):
        out = []
        for value in values:
            if isinstance(value, MappedArray):
                value._clbuf_check()
                value = value.view(np.ndarray)
            out.append(value)
        return tuple(out)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = self._plain(inputs)
        outs = kwargs.get("out")
        if outs:
            kwargs["out"] = self._plain(outs)
        result = getattr(ufunc, method)(*inputs, **kwargs)
        if outs:
            return outs[0] if len(outs) == 1 else outs
        return result

    def __array_function__(self, func, types, args, kwargs):
        self._clbuf_check()
        return super().__array_function__(func, types, self._plain(args), kwargs)

    def __array__(self, *args, **kwargs):
        self._clbuf_check()
        return self.view(np.ndarray).__array__(*args, **kwargs)


def _guarded(name):
    method = getattr(np.ndarray, name)

    def guarded(self, *args, **kwargs):
        self._clbuf_check()
        return method(self, *args, **kwargs)

    guarded.__name__ = name
    guarded.__doc__ = method.__doc__
    return guarded


for _name in ("__getitem__", "__setitem__", "__iter__", "__len__", "__repr__", "__str__",
              "__bool__", "__int__", "__float__", "__complex__", "__index__", "__contains__",
              "__reduce__", "__reduce_ex__", "__copy__", "__deepcopy__", "__format__",
              "tobytes", "tolist", "tofile", "item", "itemset", "copy", "astype", "view",
              "fill", "reshape", "ravel", "flatten", "transpose", "byteswap", "dump", "dumps",
              "getfield", "setfield", "sort", "put", "take", "resize", "squeeze", "swapaxes",
              "searchsorted", "nonzero", "argsort", "partition", "argpartition", "compress",
              "choose", "repeat", "diagonal", "trace", "dot"):
    if hasattr(np.ndarray, _name):
        setattr(MappedArray, _name, _guarded(_name))
del _name
