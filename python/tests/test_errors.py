# SPDX-License-Identifier: MIT
"""Every error names the call the user made, in the shape clbuf.Error documents (issue 35):
"<operation>: <CL_NAME> (<code>): <details>", and "<operation>: <details>" for code 0 (misuse
OpenCL has no code for). The library's own operations ("copy_bytes", "upload", "allocate",
"queue") never show: to_pyopencl() after cleanup() once said "queue: ...", fill() of a CPU
device's buffer "upload: ...", empty() "allocate: ..."."""
import re

import numpy as np
import pytest

import clbuf

CL_SUCCESS = 0
RNG = np.random.default_rng(3535)


def assert_shape(error, operation):
    """`error` reads as clbuf.Error documents it, naming `operation`."""
    message = str(error)
    if error.code == CL_SUCCESS:
        assert re.match(rf"{re.escape(operation)}: (?!CL_)\S", message), message
        return
    match = re.match(rf"{re.escape(operation)}: (CL_[A-Z0-9_]+) \((-?\d+)\): \S", message)
    assert match, message
    assert match.group(1) == clbuf.error_name(error.code) == error.name, message
    assert int(match.group(2)) == error.code, message


def raises(call, operation, code):
    with pytest.raises(clbuf.Error) as info:
        call()
    assert info.value.code == code, str(info.value)
    assert_shape(info.value, operation)
    return info.value


def rand(count, dtype):
    dtype = np.dtype(dtype)
    return np.frombuffer(RNG.integers(1, 256, count * dtype.itemsize, dtype=np.uint8).tobytes(),
                         dtype=dtype).copy()


def test_every_call_after_cleanup_names_itself(new_manager):
    bm = new_manager()
    f32 = bm.upload_to_device(rand(8, np.float32))
    u8 = bm.upload_to_device(rand(8, np.uint8))
    host = rand(8, np.float32)
    region = clbuf.Region(size=(2, 1, 1), src_extents=(8, 1, 1), dst_extents=(8, 1, 1))
    bm.cleanup()
    calls = {
        "upload_to_device": lambda: bm.upload_to_device(host),
        "download_from_device": lambda: bm.download_from_device(f32),
        "copy_device_buffer": lambda: bm.copy_device_buffer(f32, f32, 4, 0, 16),
        "empty": lambda: bm.empty(4, np.float32),
        "fill": lambda: bm.fill(f32, 1.5),  # the host path of a CPU device: "upload" before
        "upload_into": lambda: bm.upload_into(f32, host),
        "upload_rect": lambda: bm.upload_rect(f32, host, region),
        "download_rect": lambda: bm.download_rect(f32, host, region),
        "copy_rect": lambda: bm.copy_rect(f32, f32, clbuf.Region(
            size=(2, 1, 1), src_extents=(8, 1, 1), dst_origin=(4, 0, 0), dst_extents=(8, 1, 1))),
        "upload_async": lambda: bm.upload_async(host),
        "download_async": lambda: bm.download_async(f32),
        "fill_async": lambda: bm.fill_async(u8, 3),
        "upload_into_async": lambda: bm.upload_into_async(f32, host),
        "copy_async": lambda: bm.copy_async(f32, f32, 4, 0, 16),
        "pinned_empty": lambda: bm.pinned_empty(4, np.float32),
        "context_int_ptr": lambda: bm.context_int_ptr,
        "queue_int_ptr": lambda: bm.queue_int_ptr,
        "finish": bm.finish,
        "map": lambda: bm.map(f32).__enter__(),
        "view": lambda: f32[1:2],  # buf[i:j]
    }
    for operation, call in calls.items():
        error = raises(call, operation, CL_SUCCESS)
        assert "cleanup()" in str(error), str(error)


def test_to_pyopencl_after_cleanup_names_itself(new_manager):
    pytest.importorskip("pyopencl")
    bm = new_manager()
    buf = bm.upload_to_device(rand(8, np.float32))
    bm.cleanup()
    error = raises(buf.to_pyopencl, "to_pyopencl", CL_SUCCESS)
    assert str(error) == ("to_pyopencl: the BufferManager was released by cleanup(); create a "
                          "new BufferManager")


def test_the_librarys_checks_name_the_call_made(bm):
    data = rand(16, np.float32)
    buf = bm.upload_to_device(data)
    other = bm.upload_to_device(rand(16, np.float32))
    # each rejected by the C++ library, whose own operation differs from the Python call's
    raises(lambda: bm.copy_device_buffer(buf, other, 8, 60), "copy_device_buffer", -30)
    raises(lambda: bm.copy_device_buffer(buf, buf, 16, 0, 8), "copy_device_buffer", -8)
    raises(lambda: bm.copy_async(buf, other, 8, 0, 60), "copy_async", -30)
    raises(lambda: bm.upload_into(buf, data[:4], 13), "upload_into", -30)
    raises(lambda: bm.upload_into_async(buf, data[:4], 13), "upload_into_async", -30)
    raises(lambda: bm.upload_rect(buf, data, clbuf.Region(size=(4, 1, 1), src_extents=(16, 1, 1),
                                                          dst_origin=(14, 0, 0),
                                                          dst_extents=(16, 1, 1))),
           "upload_rect", -30)
    # and the checks of the Python side
    raises(lambda: bm.download_from_device(buf, (3,)), "download_from_device", -30)
    raises(lambda: bm.fill(buf, 1e39), "fill", -30)
    raises(lambda: bm.empty(-1), "empty", -30)
    raises(lambda: bm.map(buf, "x"), "map", -30)
    raises(lambda: clbuf.error_name(1.5), "error_name", -30)
    raises(lambda: clbuf.BufferManager(b"gpu"), "BufferManager", -30)
    raises(lambda: clbuf.explain_selection(3), "explain_selection", -30)
    assert bm.download_from_device(other).tobytes() != data.tobytes()  # nothing was copied
    assert bm.download_from_device(buf).tobytes() == data.tobytes()


def test_errors_of_objects_never_initialised_name_the_member(bm):
    raises(lambda: clbuf.BufferManager.__new__(clbuf.BufferManager).stats(), "stats", CL_SUCCESS)
    raises(lambda: clbuf.DeviceBuffer.__new__(clbuf.DeviceBuffer).nbytes, "nbytes", CL_SUCCESS)
    raises(lambda: clbuf.Future.__new__(clbuf.Future).get(), "Future.get", CL_SUCCESS)
    raises(lambda: clbuf.DeviceInfo.__new__(clbuf.DeviceInfo).name, "DeviceInfo.name",
           CL_SUCCESS)


def test_a_closed_mapping_names_map(bm):
    buf = bm.upload_to_device(rand(8, np.float32))
    with bm.map(buf, "rw") as mapped:
        pass
    raises(lambda: mapped[0], "map", -59)
    raises(lambda: bm.upload_into(buf, mapped), "upload_into", -59)


def test_a_nul_in_the_details_is_written_as_the_library_writes_it(bm):
    """Python's own errors are worded by the library's message function (issue 48): a NUL in
    the details is written \\0, as C++'s errors write it, never cutting the message short (the
    module's copy of that function lacked the escape: this message ended at "bad")."""
    class Region:
        @property
        def size(self):
            raise ValueError("bad\0tail")

    buf = bm.upload_to_device(rand(8, np.float32))
    error = raises(lambda: bm.upload_rect(buf, rand(8, np.float32), Region()), "upload_rect", -30)
    assert str(error) == ("upload_rect: CL_INVALID_VALUE (-30): region must be a clbuf.Region, "
                          "not Region (ValueError: bad\\0tail)")
    # An error of the C++ library with a NUL in its details reads the same way.
    with pytest.raises(clbuf.Error) as info:
        clbuf.DeviceGroup("no\0such device")
    assert info.value.code == -1
    assert str(info.value).startswith(
        'DeviceGroup: CL_DEVICE_NOT_FOUND (-1): no device matches "no\\0such device"; devices: ')
