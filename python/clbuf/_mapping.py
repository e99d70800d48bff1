# SPDX-License-Identifier: MIT
"""The array of ``with bm.map(buf, mode) as a:`` (clbuf.MappedArray).

The array's memory is owned by its mapping (python/src/host_memory.hpp): it stays valid as long as
the array, so no use of the array can crash. After the ``with`` block the mapping is closed and
the array refuses every use that goes through it (indexing, arithmetic, numpy functions, every
method and every attribute that reaches its elements, clbuf's own calls) with clbuf.Error. What
takes the memory through the buffer protocol or as a plain ndarray (``memoryview(a)``,
``np.asarray(a)``) bypasses that check: it reaches memory that is still valid but no longer
mapped; on a CPU device (zero copy) that memory is the buffer's own, so writes through it reach
the buffer.
"""
import inspect
import types

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
    guarded.__doc__ = method.__doc__ or (
        f"numpy.ndarray.{name} of the mapped array; clbuf.Error once the mapping is closed.")
    return guarded


# Every method and every attribute that reaches the array's memory checks first. Left alone: the
# hooks numpy and Python call on the class itself (construction, the checks above, attribute
# machinery) and the metadata that reads no element (dtype, shape, strides, flags, sizes).
_UNGUARDED = {
    "__array_finalize__", "__array_ufunc__", "__array_function__", "__array__",
    "__array_priority__", "__array_wrap__", "__array_prepare__", "__new__", "__init__",
    "__init_subclass__", "__subclasshook__", "__class_getitem__", "__getattribute__",
    "__setattr__", "__delattr__", "__class__", "__dict__", "__doc__", "__hash__", "__sizeof__",
    "__dir__", "__reduce_cython__", "__setstate_cython__",
    "dtype", "shape", "ndim", "size", "itemsize", "nbytes", "strides", "flags",
}


def _guarded_property(name):
    attribute = getattr(np.ndarray, name)

    def get(self):
        self._clbuf_check()
        return attribute.__get__(self, type(self))

    def set(self, value):
        self._clbuf_check()
        attribute.__set__(self, value)

    return property(get, set if hasattr(attribute, "__set__") else None, None,
                    getattr(attribute, "__doc__", None))


for _name in dir(np.ndarray):
    if _name in _UNGUARDED or _name in MappedArray.__dict__:
        continue
    _attribute = inspect.getattr_static(np.ndarray, _name)
    if isinstance(_attribute, (types.GetSetDescriptorType, types.MemberDescriptorType, property)):
        setattr(MappedArray, _name, _guarded_property(_name))
    elif callable(_attribute) and not isinstance(_attribute, (classmethod, staticmethod)):
        setattr(MappedArray, _name, _guarded(_name))
del _name, _attribute
