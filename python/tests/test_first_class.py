# SPDX-License-Identifier: MIT
"""Issue 20: every call of the first-class Python API with exact data, and every bad input of
its "Done when" list as a clbuf.Error (wrong dtype/size for out, non-contiguous input, view out
of range, a map used after its block, adopting an object of another context, pyopencl absent)."""
import array
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import clbuf

CL_INVALID_VALUE = -30
CL_INVALID_CONTEXT = -34
CL_INVALID_MEM_OBJECT = -38
CL_INVALID_OPERATION = -59
CL_MEM_COPY_OVERLAP = -8

RNG = np.random.default_rng(20)


def rand(shape, dtype):
    dtype = np.dtype(dtype)
    count = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer(RNG.integers(0, 256, count, dtype=np.uint8).tobytes(),
                         dtype=dtype).reshape(shape).copy()


def same(a, b):
    assert np.asarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def error(call, code, *fragments):
    with pytest.raises(clbuf.Error) as info:
        call()
    assert info.value.code == code, str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    return info.value


# ---- host data with the buffer protocol ----------------------------------------------------

def test_bytes_bytearray_memoryview_array_upload_as_their_format(bm):
    raw = rand((64,), np.uint8).tobytes()
    for data in (raw, bytearray(raw), memoryview(raw)):
        handle = bm.upload_to_device(data)
        assert handle.dtype == np.uint8 and handle.shape == (64,)
        assert bm.download_from_device(handle).tobytes() == raw
    doubles = array.array("d", rand((10,), np.float64).tolist())
    handle = bm.upload_to_device(doubles)
    assert handle.dtype == np.float64 and handle.shape == (10,)
    assert bm.download_from_device(handle).tobytes() == doubles.tobytes()
    shaped = memoryview(raw).cast("i", (4, 4))
    handle = bm.upload_to_device(shaped)
    assert handle.dtype == np.int32 and handle.shape == (4, 4)
    assert bm.download_from_device(handle).tobytes() == raw


def test_non_contiguous_buffer_objects_give_their_values_in_c_order(bm):
    raw = bytearray(rand((40,), np.uint8).tobytes())
    strided = memoryview(raw)[::3]
    handle = bm.upload_to_device(strided)
    assert bm.download_from_device(handle).tobytes() == bytes(strided)
    handle = bm.upload_async(strided).get()
    assert bm.download_from_device(handle).tobytes() == bytes(strided)


def test_objects_without_the_buffer_protocol_are_refused(bm):
    for data in ([1, 2], "text", 3, None):
        error(lambda: bm.upload_to_device(data), CL_INVALID_VALUE, "upload_to_device",
              "buffer protocol")


# ---- empty, fill, upload_into, download out=, copy offsets ---------------------------------

@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64, np.complex128,
                                   np.dtype(">i4")], ids=str)
def test_empty_and_fill(bm, dtype):
    handle = bm.empty((3, 5), dtype)
    assert handle.shape == (3, 5) and handle.dtype == np.dtype(dtype)
    assert handle.nbytes == 15 * np.dtype(dtype).itemsize
    value = 3 + 2j if np.dtype(dtype).kind == "c" else 7
    bm.fill(handle, value)
    same(bm.download_from_device(handle), np.full((3, 5), value, dtype))
    future = bm.fill_async(handle, 5)
    assert future.get() is None
    same(bm.download_from_device(handle), np.full((3, 5), 5, dtype))


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64, np.complex128],
                         ids=str)
def test_fill_leaves_every_byte_outside_its_range_alone(bm, dtype):
    # The paths of fill: the uint8 buffer itself, the host (clbuf's own memory on a CPU device,
    # in blocks of up to 64 KiB: 70001 elements end in a partial block) and the typed alias kept
    # on the DeviceBuffer (filled again, and async after sync on the same alias), on views at
    # odd offsets, with random bytes around them.
    count = 70001
    data = rand((count,), dtype)
    handle = bm.upload_to_device(data)
    values = [rand((1,), dtype)[0] for _ in range(3)]
    for start, stop in ((0, count), (1, 4), (3, 66000), (count - 5, count)):
        view = handle[start:stop]
        for value in values:
            bm.fill(view, value)
            data[start:stop] = value
            same(bm.download_from_device(handle), data)
        bm.fill_async(view, values[0]).wait()
        data[start:stop] = values[0]
        same(bm.download_from_device(handle), data)
    empty = handle[7:7]
    bm.fill(empty, values[1])
    bm.fill_async(empty, values[1]).wait()
    same(bm.download_from_device(handle), data)


def test_fill_takes_only_a_value_the_buffer_dtype_holds(bm):
    # 2.9 was once truncated to 2 (issue 35); every dtype pair is in test_values.py.
    handle = bm.empty(4, np.int32)
    bm.fill(handle, 2.0)
    same(bm.download_from_device(handle), np.full(4, 2, np.int32))
    error(lambda: bm.fill(handle, 2.9), CL_INVALID_VALUE, "fill", "not a whole number")
    same(bm.download_from_device(handle), np.full(4, 2, np.int32))
    error(lambda: bm.fill(handle, "abc"), CL_INVALID_VALUE, "fill", "cannot be cast to int32")
    error(lambda: bm.fill(handle, [1, 2]), CL_INVALID_VALUE, "fill", "single value")


def test_upload_into_at_an_offset(bm):
    base = rand((100,), np.float32)
    handle = bm.upload_to_device(base)
    part = rand((10,), np.float32)
    bm.upload_into(handle, part, offset=37)
    expected = base.copy()
    expected[37:47] = part
    same(bm.download_from_device(handle), expected)
    part2 = rand((5,), np.float32)
    assert bm.upload_into_async(handle, part2, 95).get() is None
    expected[95:] = part2
    same(bm.download_from_device(handle), expected)


def test_upload_into_bad_input(bm):
    handle = bm.empty(10, np.float32)
    error(lambda: bm.upload_into(handle, np.zeros(3, np.float64)), CL_INVALID_VALUE,
          "upload_into", "dtype float64", "float32")
    error(lambda: bm.upload_into(handle, np.zeros(3, np.float32), offset=8), CL_INVALID_VALUE,
          "upload")
    error(lambda: bm.upload_into(handle, np.zeros(3, np.float32), offset=-1), CL_INVALID_VALUE,
          "offset must not be negative")


def test_download_into_out_fills_and_returns_it(bm):
    data = rand((4, 6), np.int16)
    handle = bm.upload_to_device(data)
    out = np.zeros((4, 6), np.int16)
    assert bm.download_from_device(handle, out=out) is out
    same(out, data)
    flat = np.zeros(24, np.int16)
    assert bm.download_from_device(handle, out=flat) is flat  # any shape of the same bytes
    same(flat, data)
    raw = bytearray(48)
    bm.download_from_device(bm.upload_to_device(data.view(np.uint8)), out=raw)
    assert bytes(raw) == data.tobytes()
    out2 = np.zeros_like(data)
    assert bm.download_async(handle, out=out2).get() is out2
    same(out2, data)


def test_download_out_of_the_wrong_dtype_size_or_layout(bm):
    handle = bm.upload_to_device(rand((10,), np.float32))
    error(lambda: bm.download_from_device(handle, out=np.zeros(10, np.int32)), CL_INVALID_VALUE,
          "download_from_device", "out has dtype int32, not float32")
    error(lambda: bm.download_from_device(handle, out=np.zeros(11, np.float32)),
          CL_INVALID_VALUE, "out holds 44 bytes", "40 bytes")
    error(lambda: bm.download_from_device(handle, out=np.zeros(20, np.float32)[::2]),
          CL_INVALID_VALUE, "C-contiguous")
    readonly = np.zeros(10, np.float32)
    readonly.flags.writeable = False
    error(lambda: bm.download_from_device(handle, out=readonly), CL_INVALID_VALUE, "read-only")
    error(lambda: bm.download_from_device(handle, out=b"x" * 40), CL_INVALID_VALUE, "read-only")
    error(lambda: bm.download_async(handle, out=np.zeros(3, np.float32)), CL_INVALID_VALUE,
          "download_async", "out holds 12 bytes")


def test_copy_device_buffer_with_offsets(bm):
    src = rand((64,), np.uint8)
    dst = rand((64,), np.uint8)
    hs, hd = bm.upload_to_device(src), bm.upload_to_device(dst)
    bm.copy_device_buffer(hs, hd, 10, 5, 40)
    expected = dst.copy()
    expected[40:50] = src[5:15]
    same(bm.download_from_device(hd), expected)
    assert bm.copy_async(hs, hd, 3, src_offset=0, dst_offset=0).get() is None
    expected[:3] = src[:3]
    same(bm.download_from_device(hd), expected)
    # the library's check, named as the call made (it was "copy_bytes: ..." before issue 35)
    error(lambda: bm.copy_device_buffer(hs, hd, 10, 60, 0), CL_INVALID_VALUE,
          "copy_device_buffer: CL_INVALID_VALUE (-30): read of 10 bytes at offset 60 past the end")
    error(lambda: bm.copy_device_buffer(hs, hs, 10, 0, 5), CL_MEM_COPY_OVERLAP)


# ---- views ---------------------------------------------------------------------------------

def test_views_share_memory_at_any_offset(bm):
    data = rand((1000,), np.float32)
    handle = bm.upload_to_device(data)
    for start, stop in ((1, 4), (3, 500), (999, 1000), (-10, -2), (0, 1000)):
        view = handle[start:stop]
        assert view.is_view and view.shape == (len(data[start:stop]),)
        same(bm.download_from_device(view), data[start:stop])
    view = handle[1:5]
    bm.fill(view, 9)
    data[1:5] = 9
    same(bm.download_from_device(handle), data)
    inner = view[1:3]  # a view of a view: the same root
    bm.upload_into(inner, np.array([1.5, 2.5], np.float32))
    data[2:4] = [1.5, 2.5]
    same(bm.download_from_device(handle), data)
    assert inner.int_ptr == handle.int_ptr and inner.native_offset_bytes == 8


def test_views_of_the_first_axis(bm):
    data = rand((6, 3, 2), np.int64)
    handle = bm.upload_to_device(data)
    view = handle[2:5]
    assert view.shape == (3, 3, 2) and len(view) == 3
    same(bm.download_from_device(view), data[2:5])
    other = bm.upload_to_device(rand((6, 3, 2), np.int64))
    bm.copy_device_buffer(view, other, view.nbytes)
    same(bm.download_from_device(other)[:3], data[2:5])


def test_a_view_outlives_its_parent(bm):
    data = rand((100,), np.int32)
    view = bm.upload_to_device(data)[10:20]
    for _ in range(5):
        bm.upload_to_device(rand((100,), np.int32))  # would reuse freed memory
    same(bm.download_from_device(view), data[10:20])


def test_views_out_of_range_or_not_a_slice(bm):
    handle = bm.upload_to_device(rand((10,), np.float32))
    error(lambda: handle[5:20], CL_INVALID_VALUE, "view", "[5:20] is out of range", "10 rows")
    error(lambda: handle[-11:], CL_INVALID_VALUE, "out of range")
    error(lambda: handle[6:2], CL_INVALID_VALUE, "out of range")
    error(lambda: handle[::2], CL_INVALID_VALUE, "step 2")
    error(lambda: handle[3], CL_INVALID_VALUE, "takes a slice")


# ---- map, pinned -------------------------------------------------------------------------

def test_map_read_write_and_write(bm):
    data = rand((4, 5), np.float64)
    handle = bm.upload_to_device(data)
    with bm.map(handle, "r") as a:
        assert isinstance(a, np.ndarray) and a.shape == (4, 5) and a.dtype == np.float64
        same(a.view(np.ndarray), data)
        with pytest.raises(ValueError):
            a[0, 0] = 1
    with bm.map(handle, "rw") as a:
        a[1] = 42.0
    data[1] = 42.0
    same(bm.download_from_device(handle), data)
    with bm.map(handle[2:4], "w") as a:
        a[...] = -1.0
    data[2:4] = -1.0
    same(bm.download_from_device(handle), data)


def test_a_map_used_after_its_block_raises(bm):
    handle = bm.upload_to_device(rand((8,), np.int32))
    with bm.map(handle) as a:
        b = a[2:]
        assert int(a.sum()) == int(bm.download_from_device(handle).astype(np.int64).sum())
    for use in (lambda: a[0], lambda: a + 1, lambda: a.sum(), lambda: np.sum(a),
                lambda: repr(a), lambda: a.tobytes(), lambda: b[0], lambda: a.copy()):
        error(use, CL_INVALID_OPERATION, "map", "after its with block")
    def write():
        a[0] = 1
    error(write, CL_INVALID_OPERATION)
    # what bypasses the check reads memory that is still valid (no crash), in a subprocess
    script = """
import numpy as np, clbuf
bm = clbuf.BufferManager()
h = bm.upload_to_device(np.arange(1 << 16, dtype=np.float64))
with bm.map(h) as a:
    pass
plain = np.asarray(a)
del h, a
import gc; gc.collect()
for _ in range(20):
    bm.upload_to_device(np.zeros(1 << 16))
print(float(plain.sum()) >= 0)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert result.returncode == 0 and "True" in result.stdout, result.stderr


def test_map_bad_mode(bm):
    handle = bm.empty(4, np.float32)
    error(lambda: bm.map(handle, "x"), CL_INVALID_VALUE, "map", "mode must be")


def test_pinned_empty_round_trip(bm):
    pinned = bm.pinned_empty((3, 7), np.float32)
    assert pinned.shape == (3, 7) and pinned.dtype == np.float32
    data = rand((3, 7), np.float32)
    pinned[...] = data
    handle = bm.upload_to_device(pinned)
    same(bm.download_from_device(handle), data)
    pinned[...] = 0
    assert bm.download_from_device(handle, out=pinned) is pinned
    same(pinned, data)
    bm.upload_into(handle, pinned)
    same(bm.download_from_device(handle), data)
    del pinned  # clbuf keeps the memory alive as long as the array; then frees it


# ---- async with wait_for, events ------------------------------------------------------------

def test_wait_for_orders_async_calls(bm):
    data = rand((1 << 16,), np.int32)
    handle = bm.empty(1 << 16, np.int32)
    other = bm.empty(1 << 16, np.int32)
    up = bm.upload_into_async(handle, data)
    copy = bm.copy_async(handle, other, data.nbytes, wait_for=[up])
    down = bm.download_async(other, wait_for=[copy])
    same(down.get(), data)
    assert up.event_int_ptr != 0 or up.ready()
    filled = bm.fill_async(other, 1, wait_for=[down])
    filled.wait()
    same(bm.download_from_device(other), np.ones(1 << 16, np.int32))


def test_wait_for_bad_input(bm):
    handle = bm.empty(4, np.int32)
    error(lambda: bm.fill_async(handle, 1, wait_for=5), CL_INVALID_VALUE, "fill_async",
          "wait_for must be a list")
    error(lambda: bm.fill_async(handle, 1, wait_for=["x"]), -58, "wait_for holds a str")


# ---- rectangles -------------------------------------------------------------------------

def test_rect_calls_mirror_the_cpp_region(bm):
    host = rand((5, 6), np.float32)  # 5 rows of 6
    dev = bm.empty((4, 8), np.float32)
    bm.fill(dev, 0)
    region = clbuf.Region(size=(3, 2, 1), src_origin=(1, 2, 0), src_extents=(6, 5, 1),
                          dst_origin=(4, 1, 0), dst_extents=(8, 4, 1))
    bm.upload_rect(dev, host, region)
    expected = np.zeros((4, 8), np.float32)
    expected[1:3, 4:7] = host[2:4, 1:4]
    same(bm.download_from_device(dev), expected)
    back = np.zeros((2, 3), np.float32)
    bm.download_rect(dev, back, clbuf.Region(size=(3, 2, 1), src_origin=(4, 1, 0),
                                             src_extents=(8, 4, 1), dst_extents=(3, 2, 1)))
    same(back, host[2:4, 1:4])
    dst = bm.empty((4, 8), np.float32)
    bm.fill(dst, 1)
    bm.copy_rect(dev, dst, clbuf.Region(size=(8, 2, 1), src_origin=(0, 1, 0),
                                        src_extents=(8, 4, 1), dst_origin=(0, 2, 0),
                                        dst_extents=(8, 4, 1)))
    expected2 = np.ones((4, 8), np.float32)
    expected2[2:4] = expected[1:3]
    same(bm.download_from_device(dst), expected2)


def test_rect_bad_input(bm):
    dev = bm.empty((4, 8), np.float32)
    error(lambda: bm.upload_rect(dev, np.zeros(4, np.float32), None), CL_INVALID_VALUE,
          "upload_rect", "region must be a clbuf.Region")
    error(lambda: bm.upload_rect(dev, np.zeros(4, np.float32), clbuf.Region(size=(1, 1))),
          CL_INVALID_VALUE, "region.size must be a tuple of three")
    error(lambda: bm.upload_rect(dev, np.zeros(4, np.float32),
                                 clbuf.Region(size=(5, 1, 1), src_extents=(4, 1, 1),
                                              dst_extents=(8, 4, 1))), CL_INVALID_VALUE)
    error(lambda: bm.download_rect(dev, np.zeros(4, np.int32), clbuf.Region()),
          CL_INVALID_VALUE, "dtype int32")
    error(lambda: bm.copy_rect(dev, bm.empty(32, np.int32), clbuf.Region()), CL_INVALID_VALUE,
          "copy_rect", "float32", "int32")


# ---- selection, threads ----------------------------------------------------------------------

def test_explain_selection(bm):
    text = clbuf.explain_selection()
    assert bm.device.name in text and "picked" in text
    assert bm.device.name in bm.explain_selection()
    assert "cpu" in clbuf.explain_selection("cpu")
    error(lambda: clbuf.explain_selection(5), CL_INVALID_VALUE, "explain_selection")


def test_threads_share_a_manager(bm):
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                data = rng.random(257).astype(np.float32)
                handle = bm.empty(257, np.float32)
                bm.upload_into(handle, data)
                view = handle[3:200]
                out = np.empty(197, np.float32)
                bm.download_from_device(view, out=out)
                assert out.tobytes() == data[3:200].tobytes()
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


def test_threads_upload_download_and_slice_one_buffer_at_once(bm):
    # Four threads on one manager and one DeviceBuffer at the same time: each slices its own rows
    # (new views of the same root in every round), uploads into them, fills part of them, copies
    # them into its rows of a second shared buffer and downloads them, while every thread also
    # reads and fills (sync and async, the same value) a block that all of them share. Exact
    # data throughout, and at the end every thread's last rows are where they belong.
    threads, rows, shared_rows, rounds = 4, 301, 17, 40
    width = 3
    total = shared_rows + threads * rows
    common = np.full((shared_rows, width), 7.0)
    buf = bm.upload_to_device(np.concatenate([common, rand((threads * rows, width), np.float64)]))
    mirror = bm.empty((total, width), np.float64)
    block = buf[:shared_rows]  # one view object every thread uses
    start = threading.Barrier(threads)
    last = [None] * threads
    failures = []

    def work(k):
        rng = np.random.default_rng(100 + k)
        first = shared_rows + k * rows
        try:
            start.wait()
            for r in range(rounds):
                data = rng.random((rows, width))
                mine = buf[first:first + rows]
                if r % 2:
                    bm.upload_into(mine, data)
                else:
                    bm.upload_into(buf, data, first * width)  # the root, at an element offset
                cut = int(rng.integers(1, rows))
                value = float(rng.random())
                bm.fill(mine[cut:], value)
                data[cut:] = value
                got = bm.download_from_device(buf[first:first + rows])
                assert got.tobytes() == data.tobytes(), f"thread {k} round {r}"
                bm.copy_device_buffer(buf, mirror, rows * width * 8, first * width * 8,
                                      first * width * 8)
                out = np.empty((rows, width))
                bm.download_from_device(mirror[first:first + rows], out=out)
                assert out.tobytes() == data.tobytes(), f"thread {k} round {r} (mirror)"
                if r % 2:
                    bm.fill(block, 7.0)
                else:
                    bm.fill_async(block, 7.0).wait()
                assert bm.download_from_device(block).tobytes() == common.tobytes()
                last[k] = data
        except Exception as e:  # noqa: BLE001
            failures.append(e)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not failures, failures
    expected = np.concatenate([common] + last)
    assert bm.download_from_device(buf).tobytes() == expected.tobytes()
    mirrored = bm.download_from_device(mirror)[shared_rows:]
    assert mirrored.tobytes() == expected[shared_rows:].tobytes()
