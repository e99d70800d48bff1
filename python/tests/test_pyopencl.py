# SPDX-License-Identifier: MIT
"""pyopencl interop for real (issue 20): a pyopencl kernel doubles an array clbuf uploaded, clbuf
downloads it, and int_ptr shows that no copy was made; adopt, from_pyopencl, events; and every
interop call with pyopencl absent raises clbuf.Error."""
import os
import subprocess
import sys

import numpy as np
import pytest

import clbuf

cl = pytest.importorskip("pyopencl")
cl_array = pytest.importorskip("pyopencl.array")

DOUBLE = """
__kernel void twice(__global float* x, const unsigned long offset) { x[offset + get_global_id(0)] *= 2.0f; }
"""


@pytest.fixture
def shared():
    """A pyopencl queue and a clbuf manager on it (from_pyopencl)."""
    try:
        platform = cl.get_platforms()[0]
        device = platform.get_devices()[0]
    except cl.Error as error:
        pytest.skip(f"no OpenCL device for pyopencl: {error}")
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    bm = clbuf.BufferManager.from_pyopencl(queue)
    yield context, queue, bm
    bm.cleanup()


def test_a_pyopencl_kernel_doubles_what_clbuf_uploaded(shared):
    context, queue, bm = shared
    assert bm.context_int_ptr == context.int_ptr and bm.queue_int_ptr == queue.int_ptr
    data = np.random.default_rng(1).random(1000).astype(np.float32)
    buf = bm.upload_to_device(data)
    program = cl.Program(context, DOUBLE).build()
    mem = cl.Buffer.from_int_ptr(buf.int_ptr, retain=True)
    program.twice(queue, (1000,), None, mem, np.uint64(buf.native_offset_bytes // 4))
    assert mem.int_ptr == buf.int_ptr  # the same cl_mem: no copy
    np.testing.assert_array_equal(bm.download_from_device(buf), data * 2)


def test_to_pyopencl_arrays_compute_on_clbuf_memory(shared):
    context, queue, bm = shared
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    buf = bm.upload_to_device(data)
    arr = buf.to_pyopencl()
    assert arr.shape == (4, 6) and arr.dtype == np.float32
    assert arr.base_data.int_ptr == buf.int_ptr and arr.offset == 0
    np.testing.assert_array_equal((arr + 2).get(), data + 2)
    arr *= 3  # in place, on clbuf's memory
    np.testing.assert_array_equal(bm.download_from_device(buf), data * 3)
    view = buf[1:3]
    varr = view.to_pyopencl()
    assert varr.base_data.int_ptr == buf.int_ptr and varr.offset == 6 * 4
    np.testing.assert_array_equal(varr.get(), data[1:3] * 3)
    # the memory stays the pyopencl array's after clbuf's buffer is gone (never pooled again)
    del buf, view
    for _ in range(5):
        bm.upload_to_device(np.zeros((4, 6), np.float32))
    np.testing.assert_array_equal(arr.get(), data * 3)


COPY_AT = """
__kernel void copy_at(__global const uint* in, const unsigned long offset, __global uint* out) {
  out[get_global_id(0)] = in[offset + get_global_id(0)];
}
"""


def test_overlapping_views_reach_pyopencl_kernels_with_no_sub_buffer(shared):
    """The conformance suite's overlapping sub-buffer pattern from Python (issue 38): 16
    overlapping views, each to a kernel by int_ptr + native_offset_bytes or to_pyopencl(), then
    dropped oldest first, three rounds. A view hands out its root's cl_mem, never a sub-buffer,
    so NVIDIA's crash releasing overlapping sub-buffers cannot be reached from Python."""
    context, queue, bm = shared
    rng = np.random.default_rng(38)
    data = rng.integers(0, 2**32, 1 << 14, dtype=np.uint32)
    buf = bm.upload_to_device(data)
    program = cl.Program(context, COPY_AT).build()
    out = cl.Buffer(context, cl.mem_flags.READ_WRITE, data.nbytes)
    for _ in range(3):
        views = []
        for i in range(16):
            start = int(rng.integers(0, len(data) - 1))
            stop = int(rng.integers(start + 1, len(data) + 1))
            view = buf[start:stop]
            views.append(view)
            assert view.int_ptr == buf.int_ptr and view.native_offset_bytes == start * 4
            mem = cl.Buffer.from_int_ptr(view.int_ptr, retain=True)
            assert mem.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT) is None  # not a sub-buffer
            if i % 2:
                arr = view.to_pyopencl()
                assert arr.base_data.int_ptr == buf.int_ptr and arr.offset == start * 4
                mem = arr.base_data
            program.copy_at(queue, (stop - start,), None, mem, np.uint64(start), out)
            got = np.empty(stop - start, np.uint32)
            cl.enqueue_copy(queue, got, out)
            np.testing.assert_array_equal(got, data[start:stop])
        while views:
            del views[0]  # oldest first: the order that crashed NVIDIA's driver with sub-buffers
    np.testing.assert_array_equal(bm.download_from_device(buf), data)


def test_adopt_pyopencl_buffers_and_arrays(shared):
    context, queue, bm = shared
    data = np.random.default_rng(2).integers(0, 1000, 50).astype(np.int64)
    arr = cl_array.to_device(queue, data)
    buf = bm.adopt(arr)
    assert buf.dtype == np.int64 and buf.shape == (50,) and buf.int_ptr == arr.base_data.int_ptr
    np.testing.assert_array_equal(bm.download_from_device(buf), data)
    bm.fill(buf, 7)
    np.testing.assert_array_equal(arr.get(), np.full(50, 7))
    sub = bm.adopt(arr[10:20])
    assert sub.is_view and sub.native_offset_bytes == 80
    bm.upload_into(sub, np.arange(10, dtype=np.int64))
    expected = np.full(50, 7)
    expected[10:20] = np.arange(10)
    np.testing.assert_array_equal(arr.get(), expected)
    raw = cl.Buffer(context, cl.mem_flags.READ_WRITE, 16)
    adopted = bm.adopt(raw)
    assert adopted.dtype == np.uint8 and adopted.shape == (16,) and adopted.int_ptr == raw.int_ptr


def test_adopting_an_object_of_another_context(shared):
    context, queue, bm = shared
    other = cl.Context([context.devices[0]])
    foreign = cl.Buffer(other, cl.mem_flags.READ_WRITE, 64)
    with pytest.raises(clbuf.Error) as info:
        bm.adopt(foreign)
    assert info.value.code == -34 and "adopt" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        bm.adopt(np.zeros(3))
    assert info.value.code == -38 and "pyopencl.Buffer" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        clbuf.BufferManager.from_pyopencl(context)
    assert "pyopencl.CommandQueue" in str(info.value)


def test_events_both_ways(shared):
    context, queue, bm = shared
    data = np.random.default_rng(3).random(4096).astype(np.float32)
    buf = bm.empty(4096, np.float32)
    up = bm.upload_into_async(buf, data)
    event = up.event
    assert event is None or isinstance(event, cl.Event)
    program = cl.Program(context, DOUBLE).build()
    mem = cl.Buffer.from_int_ptr(buf.int_ptr, retain=True)
    kernel_done = program.twice(queue, (4096,), None, mem, np.uint64(0),
                                wait_for=[event] if event is not None else None)
    result = bm.download_async(buf, wait_for=[kernel_done]).get()
    np.testing.assert_array_equal(result, data * 2)


def test_pyopencl_absent_gives_clbuf_errors():
    script = r"""
import sys
sys.modules["pyopencl"] = None  # import pyopencl raises ImportError
import numpy as np, clbuf
bm = clbuf.BufferManager()
buf = bm.upload_to_device(np.zeros(4, np.float32))
calls = {
    "to_pyopencl": lambda: buf.to_pyopencl(),
    "adopt": lambda: bm.adopt(object()),
    "from_pyopencl": lambda: clbuf.BufferManager.from_pyopencl(object()),
    "event": lambda: bm.fill_async(buf, 1).event,
}
for name, call in calls.items():
    try:
        call()
        print(name, "no error")
    except clbuf.Error as e:
        print(name, e.code, "pyopencl" in str(e))
assert buf.int_ptr != 0 and bm.context_int_ptr != 0  # the int handles need no pyopencl
print("done")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    for name in ("to_pyopencl", "adopt", "from_pyopencl", "event"):
        assert f"{name} -59 True" in lines, result.stdout
    assert "done" in lines


def test_out_of_an_async_download_cannot_be_resized_while_in_flight(shared):
    # bytearray and array.array accept resizing unless an export of their buffer is held: the
    # Future holds one until the download has ended, so the device never writes freed memory.
    import array
    context, _, bm = shared
    handle = bm.upload_to_device(np.full(1 << 16, 7, np.uint8))
    for out in (bytearray(1 << 16), array.array("B", bytes(1 << 16))):
        gate = cl.UserEvent(context)
        future = bm.download_async(handle, out=out, wait_for=[gate])
        with pytest.raises(BufferError):
            out.extend(b"x" * (1 << 20))
        gate.set_status(cl.command_execution_status.COMPLETE)
        assert future.get() is out
        assert bytes(out) == b"\x07" * (1 << 16)
        del future
        out.extend(b"x")  # released with the Future


def test_an_event_of_wait_for_that_fails_is_a_clbuf_error_and_the_process_lives(shared):
    # PoCL 3.1 aborts the process when an event fails that a released barrier waits for; clbuf
    # keeps its barriers until they end. Every async call, then the manager goes on.
    context, _, bm = shared
    data = np.arange(1000, dtype=np.float32)
    handle = bm.upload_to_device(data)
    other = bm.upload_to_device(np.zeros(1000, np.float32))
    calls = {
        "download_async": lambda after: bm.download_async(handle, wait_for=after),
        "upload_async": lambda after: bm.upload_async(data, wait_for=after),
        "fill_async": lambda after: bm.fill_async(other, 3, wait_for=after),
        "copy_async": lambda after: bm.copy_async(handle, other, 4000, wait_for=after),
    }
    for name, start in calls.items():
        gate = cl.UserEvent(context)
        future = start([gate])
        gate.set_status(-5)
        with pytest.raises(clbuf.Error) as caught:
            future.get()
        assert caught.value.code < 0, (name, str(caught.value))
    same = bm.download_from_device(bm.upload_to_device(data))
    assert np.array_equal(same, data)


def test_a_queue_of_your_own_reads_an_upload_after_finish(new_manager):
    # A manager of clbuf's own and pyopencl's queue on its context: bm.finish() makes the upload
    # visible to that queue (on a GPU a small upload returns before its write has run).
    bm = new_manager()
    context = cl.Context.from_int_ptr(bm.context_int_ptr)
    queue = cl.CommandQueue(context)
    data = np.random.default_rng(5).random(1000).astype(np.float32)
    buf = bm.upload_to_device(data)
    bm.finish()
    mem = cl.Buffer.from_int_ptr(buf.int_ptr, retain=True)
    cl.Program(context, DOUBLE).build().twice(queue, (1000,), None, mem, np.uint64(0))
    queue.finish()
    np.testing.assert_array_equal(bm.download_from_device(buf), data * 2)
