#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""clbuf's Python module against pyopencl on the seed's round trip and on large round trips.

    PYTHONPATH=build-python/python /usr/bin/python3 python/bench_seed.py [--quick]

A round trip is: upload a numpy array into new device memory, then download it into a new numpy
array. Peers, on the same OpenCL device in the same process:
  pyopencl Buffer: cl.Buffer(COPY_HOST_PTR) + np.empty_like + cl.enqueue_copy (blocking)
  pyopencl Array:  cl_array.to_device(queue, a) + .get()
Runs are interleaved (A B C, B C A, ...) after a warm-up; each result is checked byte-exactly
outside the timed region. Medians; ratio = clbuf time / pyopencl time (lower is better).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

import clbuf


def pyopencl_context_for(device_info):
    """A pyopencl context and in-order queue on the device clbuf picked."""
    platform = cl.get_platforms()[device_info.platform_index]
    device = platform.get_devices()[device_info.device_index]
    assert device.name.strip() == device_info.name, (device.name, device_info.name)
    context = cl.Context([device])
    return context, cl.CommandQueue(context)


def make_cases(bm, context, queue):
    mf = cl.mem_flags

    def clbuf_round_trip(a):
        handle = bm.upload_to_device(a)
        return bm.download_from_device(handle, a.shape, a.dtype)

    def pyopencl_buffer_round_trip(a):
        buffer = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
        out = np.empty_like(a)
        cl.enqueue_copy(queue, out, buffer)  # blocking by default
        return out

    def pyopencl_array_round_trip(a):
        return cl_array.to_device(queue, a).get()

    return {
        "clbuf": clbuf_round_trip,
        "pyopencl Buffer": pyopencl_buffer_round_trip,
        "pyopencl Array": pyopencl_array_round_trip,
    }


def make_copy_cases(bm, context, queue):
    """The seed's second test: upload two arrays, copy the first onto the second on the device,
    download both."""
    mf = cl.mem_flags

    def clbuf_copy(a, b):
        ha, hb = bm.upload_to_device(a), bm.upload_to_device(b)
        bm.copy_device_buffer(ha, hb, a.nbytes)
        return (bm.download_from_device(ha, a.shape, a.dtype),
                bm.download_from_device(hb, b.shape, b.dtype))

    def pyopencl_buffer_copy(a, b):
        ba = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
        bb = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=b)
        cl.enqueue_copy(queue, bb, ba, byte_count=a.nbytes)
        oa, ob = np.empty_like(a), np.empty_like(b)
        cl.enqueue_copy(queue, oa, ba)
        cl.enqueue_copy(queue, ob, bb)
        return oa, ob

    def pyopencl_array_copy(a, b):
        da, db = cl_array.to_device(queue, a), cl_array.to_device(queue, b)
        db[:] = da  # device-to-device copy
        return da.get(), db.get()

    return {
        "clbuf": clbuf_copy,
        "pyopencl Buffer": pyopencl_buffer_copy,
        "pyopencl Array": pyopencl_array_copy,
    }


def measure(functions, make_args, check, repetitions, warmup):
    names = list(functions)
    times = {name: [] for name in names}
    args = make_args()
    for name in names:
        for _ in range(warmup):
            check(functions[name](*args))
    for rep in range(repetitions):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            start = time.perf_counter()
            result = functions[name](*args)
            elapsed = time.perf_counter() - start
            check(result)
            del result
            times[name].append(elapsed)
    return {name: statistics.median(values) for name, values in times.items()}, times


def format_time(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-large", action="store_true", help="skip the 256 MiB case")
    options = parser.parse_args()
    scale = 0.2 if options.quick else 1.0

    bm = clbuf.BufferManager()
    context, queue = pyopencl_context_for(bm.device)
    info = bm.device
    print(f"device: {info.name} ({info.type}, {info.platform}); "
          f"max allocation {info.max_alloc_bytes >> 20} MiB")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"pyopencl {cl.VERSION_TEXT}, clbuf {clbuf.__version__}, {os.cpu_count()} CPUs")

    rng = np.random.default_rng(7)
    round_trip = make_cases(bm, context, queue)
    copy_cases = make_copy_cases(bm, context, queue)
    cases = [
        # name, functions, element count, repetitions, warm-up
        ("seed round trip (1000 float32)", round_trip, 1000, int(3000 * scale), 50),
        ("seed copy test (2 x 1000 float32)", copy_cases, 1000, int(2000 * scale), 50),
        ("round trip 1 MiB", round_trip, (1 << 20) // 4, int(300 * scale), 5),
    ]
    if not options.no_large:
        cases.append(("round trip 256 MiB", round_trip, (256 << 20) // 4, max(3, int(9 * scale)),
                      1))

    rows = []
    for title, functions, count, repetitions, warmup in cases:
        a = rng.random(count).astype(np.float32)
        if functions is copy_cases:
            b = rng.random(count).astype(np.float32)

            def make_args(a=a, b=b):
                return (a, b)

            def check(result, a=a):
                assert result[0].tobytes() == a.tobytes() and result[1].tobytes() == a.tobytes()
        else:
            def make_args(a=a):
                return (a,)

            def check(result, a=a):
                assert result.dtype == a.dtype and result.tobytes() == a.tobytes()

        medians, _ = measure(functions, make_args, check, repetitions, warmup)
        rows.append((title, a.nbytes, repetitions, medians))
        print(f"  {title}: " + ", ".join(f"{n} {format_time(t)}" for n, t in medians.items()),
              flush=True)

    print()
    print("| case | reps | clbuf | pyopencl Buffer | ratio | pyopencl Array | ratio |")
    print("|---|---|---|---|---|---|---|")
    for title, nbytes, repetitions, medians in rows:
        clbuf_time = medians["clbuf"]
        cells = [title, str(repetitions), format_time(clbuf_time)]
        for peer in ("pyopencl Buffer", "pyopencl Array"):
            cells += [format_time(medians[peer]), f"{clbuf_time / medians[peer]:.2f}x"]
        print("| " + " | ".join(cells) + " |")
    print()
    print("round-trip bandwidth (2 x bytes / median time):")
    for title, nbytes, _, medians in rows:
        if nbytes >= (1 << 20):
            print(f"  {title}: " + ", ".join(
                f"{n} {2 * nbytes / t / 1e9:.2f} GB/s" for n, t in medians.items()))
    bm.cleanup()


if __name__ == "__main__":
    main()
