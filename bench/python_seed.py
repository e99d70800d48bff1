#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""clbuf's Python module against pyopencl on the seed's round trip and on large round trips, and
the per-call overhead of every call against the same round trip in C++.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_seed.py [--quick] [--overhead-only]
                                                        [--cpp-bench build/bench/clbuf_bench]

A round trip is: upload a numpy array into new device memory, then download it into a new numpy
array. Peers, on the same OpenCL device in the same process:
  pyopencl Buffer: cl.Buffer(COPY_HOST_PTR) + np.empty_like + cl.enqueue_copy (blocking)
  pyopencl Array:  cl_array.to_device(queue, a) + .get()
Runs are interleaved (A B C, B C A, ...) after a warm-up; each result is checked byte-exactly
outside the timed region. Medians; ratio = clbuf time / pyopencl time (lower is better).

Per-call overhead (--overhead-only, or after the tables): each call on 1000 float32 (4000 bytes),
timed in samples of 10 back-to-back calls (median over samples of the time per call), beside its
pyopencl counterpart where it has one; the seed round trip in C++ is clbuf_bench's op
roundtrip_seed (method clbuf, 1000 float32, median) run on the same device in the same run.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

# This folder holds the package's sources (python/clbuf/, no extension), and Python puts a
# script's folder first on sys.path: the built package must come from PYTHONPATH instead.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]
import clbuf  # noqa: E402
from clbuf.cli import format_time  # noqa: E402


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


def per_call(function, samples, calls=10, warmup=200):
    """The median over `samples` samples of the time per call of `calls` back-to-back calls:
    short samples, so that a time slice lost to another process spoils few of them (as
    clbuf_bench's median of single repetitions)."""
    for _ in range(warmup):
        function()
    times = []
    clock = time.perf_counter
    for _ in range(samples):
        start = clock()
        for _ in range(calls):
            function()
        times.append((clock() - start) / calls)
    return statistics.median(times)


def cpp_seed_round_trip(path, device_info):
    """clbuf_bench's roundtrip_seed (method clbuf, 1000 float32) on the same device: median, s."""
    if not path or not os.path.exists(path):
        return None
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "seed.csv")
        device = f"{device_info.platform_index}:{device_info.device_index}"
        subprocess.run([path, "--device", device,
                        "--ops", "roundtrip_seed", "--methods", "clbuf", "--min-reps", "20000",
                        "--max-reps", "20000", "--csv", out],
                       check=True, stdout=subprocess.DEVNULL)
        with open(out, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["method"] == "clbuf" and r["ok"] == "1"]
    return float(rows[0]["median_us"]) * 1e-6 if rows else None


def overhead(bm, context, queue, cpp_bench, scale):
    """Per-call time of every call on 1000 float32 against its pyopencl counterpart and the
    seed round trip in C++."""
    mf = cl.mem_flags
    n = 1000
    rng = np.random.default_rng(11)
    a = rng.random(n).astype(np.float32)
    a2 = a.reshape(40, 25)
    out = np.empty_like(a)
    buf = bm.upload_to_device(a)
    other = bm.upload_to_device(a)
    rows2d = bm.upload_to_device(a2)
    pinned = bm.pinned_empty(n, np.float32)
    pinned[:] = a
    region = clbuf.Region(size=(10, 10, 1), src_origin=(2, 3, 0), src_extents=(25, 40, 1),
                          dst_origin=(1, 1, 0), dst_extents=(25, 40, 1))
    host2d = np.empty_like(a2)
    pbuf = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
    pother = cl.Buffer(context, mf.READ_WRITE, a.nbytes)
    parr = cl_array.to_device(queue, a)
    pcl_queue_bm = clbuf.BufferManager.from_pyopencl(queue)
    shared = pcl_queue_bm.upload_to_device(a)

    def seed():
        return bm.download_from_device(bm.upload_to_device(a), a.shape, a.dtype)

    def map_w():
        with bm.map(buf, "w") as m:
            m[0] = 1.0

    def async_upload():
        return bm.upload_async(a).get()

    def async_download():
        return bm.download_async(buf, out=out).get()

    def py_buffer_round_trip():
        b = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)
        result = np.empty_like(a)
        cl.enqueue_copy(queue, result, b)
        return result

    def py_enqueue_read():
        cl.enqueue_copy(queue, out, pbuf)

    def py_enqueue_write():
        cl.enqueue_copy(queue, pbuf, a)

    def py_fill():
        cl.enqueue_fill_buffer(queue, pother, np.float32(1.5), 0, a.nbytes).wait()

    def py_copy():
        cl.enqueue_copy(queue, pother, pbuf, byte_count=a.nbytes).wait()

    def py_async_write():
        cl.enqueue_copy(queue, pbuf, a, is_blocking=False).wait()

    # name, clbuf call, pyopencl counterpart (or None)
    calls = [
        ("seed round trip (upload_to_device + download_from_device)", seed, py_buffer_round_trip),
        ("upload_to_device(a)", lambda: bm.upload_to_device(a),
         lambda: cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=a)),
        ("download_from_device(buf, shape, dtype)",
         lambda: bm.download_from_device(buf, a.shape, a.dtype), None),
        ("download_from_device(buf, out=out)", lambda: bm.download_from_device(buf, out=out),
         py_enqueue_read),
        ("copy_device_buffer(buf, other, 4000)", lambda: bm.copy_device_buffer(buf, other, 4000),
         py_copy),
        ("copy_device_buffer(..., 2000, 400, 800)",
         lambda: bm.copy_device_buffer(buf, other, 2000, 400, 800), None),
        ("empty(1000, float32)", lambda: bm.empty(n, np.float32),
         lambda: cl.Buffer(context, mf.READ_WRITE, a.nbytes)),
        ("fill(buf, 1.5)", lambda: bm.fill(other, 1.5), py_fill),
        ("upload_into(buf, a)", lambda: bm.upload_into(other, a), py_enqueue_write),
        ("upload_into(buf, pinned)", lambda: bm.upload_into(other, pinned), None),
        ("buf[100:900]", lambda: buf[100:900], lambda: parr[100:900]),
        ("rows2d[5:30]", lambda: rows2d[5:30], None),
        ("with map(buf, 'w')", map_w, None),
        ("pinned_empty(1000, float32)", lambda: bm.pinned_empty(n, np.float32), None),
        ("upload_async(a).get()", async_upload, None),
        ("download_async(buf, out=out).get()", async_download, None),
        ("fill_async(buf, 1.5).wait()", lambda: bm.fill_async(other, 1.5).wait(), py_fill),
        ("upload_into_async(buf, a).wait()", lambda: bm.upload_into_async(other, a).wait(),
         py_async_write),
        ("copy_async(buf, other, 4000).wait()", lambda: bm.copy_async(buf, other, 4000).wait(),
         py_copy),
        ("upload_rect(rows2d, a2, region)", lambda: bm.upload_rect(rows2d, a2, region), None),
        ("download_rect(rows2d, host, region)", lambda: bm.download_rect(rows2d, host2d, region),
         None),
        ("buf.int_ptr", lambda: buf.int_ptr, lambda: pbuf.int_ptr),
        ("buf.to_pyopencl()", lambda: shared.to_pyopencl(), None),
        ("adopt(pyopencl Array)", lambda: pcl_queue_bm.adopt(parr), None),
    ]
    samples = max(200, int(3000 * scale))
    # The seed round trip in C++ and in Python, alternately, three times each (the machine's
    # load changes both alike).
    cpp_runs, python_runs = [], []
    for _ in range(3):
        cpp_runs.append(cpp_seed_round_trip(cpp_bench, bm.device))
        python_runs.append(per_call(seed, samples))
    cpp = None if None in cpp_runs else statistics.median(cpp_runs)
    seed_python = statistics.median(python_runs)
    results = []
    for name, ours, theirs in calls:
        t_ours = per_call(ours, samples)
        t_theirs = per_call(theirs, samples) if theirs else None
        results.append((name, t_ours, t_theirs))
        print(f"  {name}: {t_ours * 1e6:.2f} us"
              + (f", pyopencl {t_theirs * 1e6:.2f} us" if t_theirs else ""), flush=True)
    # what each check reads must be right, outside the timing
    assert seed().tobytes() == a.tobytes()
    bm.upload_into(other, a)
    assert bm.download_from_device(other).tobytes() == a.tobytes()
    pcl_queue_bm.cleanup()

    seed_time = seed_python
    upload_time, download_time = results[1][1], results[2][1]
    print()
    if cpp is not None:
        print(f"seed round trip (1000 float32): Python {seed_time * 1e6:.2f} us, C++ "
              f"{cpp * 1e6:.2f} us (clbuf_bench roundtrip_seed): "
              f"+{(seed_time - cpp) * 1e6:.2f} us, "
              f"{seed_time / cpp:.1f}x (target: at most C++ + 1.50 us); runs: Python "
              + ", ".join(f"{t * 1e6:.2f}" for t in python_runs) + " us, C++ "
              + ", ".join(f"{t * 1e6:.2f}" for t in cpp_runs) + " us")
    else:
        print(f"seed round trip (1000 float32): Python {seed_time * 1e6:.2f} us; C++ not measured "
              f"(no clbuf_bench at {cpp_bench!r}: --cpp-bench)")
    print(f"seed calls: upload_to_device {upload_time * 1e6:.2f} us, download_from_device "
          f"{download_time * 1e6:.2f} us")
    print()
    print("| call (1000 float32) | clbuf | / upload_to_device | pyopencl | ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, ours, theirs in results:
        cells = [name, format_time(ours), f"{ours / upload_time:.2f}x"]
        cells += [format_time(theirs), f"{ours / theirs:.2f}x"] if theirs else ["-", "-"]
        print("| " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-large", action="store_true", help="skip the 256 MiB case")
    parser.add_argument("--overhead-only", action="store_true",
                        help="only the per-call overhead table")
    parser.add_argument("--cpp-bench", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "bench", "clbuf_bench"),
        help="clbuf_bench for the C++ seed round trip (default: build/bench/clbuf_bench)")
    options = parser.parse_args()
    scale = 0.2 if options.quick else 1.0

    bm = clbuf.BufferManager()
    context, queue = pyopencl_context_for(bm.device)
    info = bm.device
    print(f"device: {info.name} ({info.type}, {info.platform}); "
          f"max allocation {info.max_alloc_bytes >> 20} MiB")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"pyopencl {cl.VERSION_TEXT}, clbuf {clbuf.__version__}, {os.cpu_count()} CPUs")

    if options.overhead_only:
        overhead(bm, context, queue, options.cpp_bench, scale)
        bm.cleanup()
        return

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
    print()
    overhead(bm, context, queue, options.cpp_bench, scale)
    bm.cleanup()


if __name__ == "__main__":
    main()
