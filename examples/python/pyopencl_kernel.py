#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A pyopencl kernel on clbuf's buffers, zero copy: clbuf uploads, a pyopencl kernel doubles the
values in place on the same cl_mem, clbuf downloads the result, and int_ptr shows that pyopencl
worked on clbuf's memory (no copy was made). Also a pyopencl Array (buf.to_pyopencl()) computing
on a view of a clbuf buffer.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/pyopencl_kernel.py
"""
import numpy as np
import pyopencl as cl

import clbuf

KERNEL = """
__kernel void twice(__global float* x, const ulong first) {
    x[first + get_global_id(0)] *= 2.0f;
}
"""

# One OpenCL context and queue, shared: clbuf adopts pyopencl's (no second context).
context = cl.create_some_context(interactive=False)
queue = cl.CommandQueue(context)
with clbuf.BufferManager.from_pyopencl(queue) as bm:
    assert bm.context_int_ptr == context.int_ptr and bm.queue_int_ptr == queue.int_ptr
    print(f"device: {bm.device.name} ({bm.device.type})")
    program = cl.Program(context, KERNEL).build()

    # 1. A kernel on the cl_mem of a clbuf buffer (int_ptr: the root cl_mem; native_offset_bytes:
    #    where the buffer starts in it, 0 here, the view's offset for a view).
    data = np.random.default_rng().random(1000).astype(np.float32)
    buf = bm.upload_to_device(data)
    mem = cl.Buffer.from_int_ptr(buf.int_ptr, retain=True)
    program.twice(queue, data.shape, None, mem, np.uint64(buf.native_offset_bytes // 4))
    queue.finish()
    doubled = bm.download_from_device(buf)
    assert doubled.tobytes() == (data * 2).tobytes(), "the kernel's result differs"
    assert mem.int_ptr == buf.int_ptr, "pyopencl's buffer is not clbuf's"
    print(f"kernel: doubled {data.size} float32 in place on cl_mem {buf.int_ptr:#x}, exact")

    # 2. to_pyopencl(): a pyopencl.array.Array on the same memory, here of a view (rows 2..5).
    matrix = np.random.default_rng().random((8, 16)).astype(np.float32)
    whole = bm.upload_to_device(matrix)
    rows = whole[2:6]  # a clbuf view: no copy
    arr = rows.to_pyopencl()
    assert arr.base_data.int_ptr == whole.int_ptr and arr.offset == rows.native_offset_bytes
    arr *= 2  # pyopencl's elementwise kernel, on clbuf's memory
    queue.finish()
    expected = matrix.copy()
    expected[2:6] *= 2
    assert bm.download_from_device(whole).tobytes() == expected.tobytes(), "to_pyopencl differs"
    print(f"to_pyopencl: rows 2..5 doubled at byte offset {arr.offset} of the same cl_mem, exact")

print("pyopencl kernel on clbuf buffers: OK, no copy")
