# SPDX-License-Identifier: MIT
"""The ``clbuf`` command (also ``python3 -m clbuf``):

    clbuf info     every OpenCL device, the one clbuf picks and why, its memory model, the path
                   each transfer size takes, its global memory and largest allocation
    clbuf bench    upload, download and the seed's round trip, clbuf against pyopencl's Buffer
                   and Array where pyopencl is installed: medians, ratios, --csv, --plot

Both pick the device as clbuf.BufferManager() does (``--device``, else CLBUF_DEVICE, else the
first GPU, else the first CPU device). Every failure, a wrong command line included, ends with
one line ``clbuf <command>: <message>`` on stderr and status 1, never a traceback; every argument
is checked, and the --csv and --plot files opened, before anything is measured.
"""
import argparse
import errno
import importlib.util
import math
import os
import re
import stat
import statistics
import sys
import time

import numpy as np

import clbuf
from clbuf import _clbuf

__all__ = ["main", "parse_size", "format_size", "format_time"]

# What each path of the engine's rule does, by the engine's own names (TransferEngine::Path in
# include/clbuf/detail/transfer_engine.hpp; stats()' paths count under the same names).
PATHS = {
    "host_copy": "memcpy into the buffer's own host memory (a CPU device), no OpenCL command",
    "staged": "pinned chunks, pipelined by the copy threads",
    "buffered": "memcpy into a pinned ring; the write follows in queue order",
    "bounced": "one DMA into a pinned block, then memcpy",
    "direct": "one clEnqueueWriteBuffer / clEnqueueReadBuffer",
}
MEMORY_MODELS = {
    "host": "a CPU device: device memory is host memory, bytes move by memcpy",
    "unified": "shares host memory (integrated GPU): no staging",
    "discrete": "own memory over a bus: large transfers are staged through pinned memory",
}
OPS = ("upload", "download", "round_trip")
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MAX_REPEAT = 1_000_000
MAX_BUDGET_S = 3600.0
CL_DEVICE_NOT_FOUND = -1


class CommandError(Exception):
    """A failure main() reports as ``clbuf <command>: <message>`` on stderr, with status 1."""


class UsageError(CommandError):
    """A command line argparse cannot read, reported as ``<prog>: <message>`` (status 1)."""

    def __init__(self, prog, message):
        super().__init__(message)
        self.prog = prog


class OutputLost(Exception):
    """Standard output could not be written (a closed pipe, a full disk)."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


def parse_size(text):
    """Bytes of a size such as ``4``, ``4B``, ``1K``, ``1KiB``, ``256M`` or ``1G`` (units of
    1024); ValueError for anything else, for 0 and for more than 2^64 bytes."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    digits = match.group(1).lstrip("0") if match else ""
    if not digits:
        raise ValueError(f"{text!r} is not a size: a positive count of bytes, optionally with K, "
                         "M or G (units of 1024), e.g. 4,1K,1M,256M")
    if len(digits) > 20 or int(digits) * UNITS[match.group(2)] > 1 << 64:
        raise ValueError(f"{text.strip()!r} is more bytes than any device holds (2^64)")
    return int(digits) * UNITS[match.group(2)]


def format_size(nbytes):
    """``nbytes`` in the largest unit of 1024 that divides it: ``4 B``, ``64 KiB``, ``256 MiB``,
    or bytes with a thousands separator."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes:,} B"


def _approximate(nbytes):
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:.1f} {name}"
    return f"{nbytes} B"


def format_time(seconds):
    """``seconds`` in us, ms or s, as the tables print it: ``3.5 us``, ``43.79 ms``, ``1.018 s``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def _manager(selector):
    """A BufferManager as the command's --device (or CLBUF_DEVICE) asks; CommandError saying
    "no device to use" where none matches, else the library's own message (an unwritable
    CLBUF_TRACE, say)."""
    try:
        return clbuf.BufferManager(selector)
    except clbuf.Error as error:
        if error.code == CL_DEVICE_NOT_FOUND:
            raise CommandError(f"no device to use: {error}") from None
        raise CommandError(str(error)) from None


def path_ranges(bm):
    """The paths of blocking uploads and downloads of numpy arrays by size, as the engine's rule
    chooses them: a list of (first byte count, last byte count, upload path, download path),
    covering 1 B to the device's largest allocation. The rule changes only at a threshold of the
    manager's options, so it is asked at 1 B and at each threshold and the byte after it."""
    options = _clbuf._options(bm)
    largest = max(1, bm.device.max_alloc_bytes)
    starts = {1}
    for name in ("staging_threshold_bytes", "buffered_upload_max_bytes", "bounce_max_bytes"):
        threshold = options[name]
        starts.update(size for size in (threshold, threshold + 1) if 1 <= size <= largest)
    starts = sorted(starts)
    ranges = []
    for index, start in enumerate(starts):
        end = starts[index + 1] - 1 if index + 1 < len(starts) else largest
        paths = (_clbuf._transfer_path(bm, start, "upload"),
                 _clbuf._transfer_path(bm, start, "download"))
        if ranges and ranges[-1][2:] == paths:
            ranges[-1] = (ranges[-1][0], end, *paths)
        else:
            ranges.append((start, end, *paths))
    return ranges


def _mpi_line():
    from . import mpi

    if not mpi.BUILT:
        return ("clbuf.mpi: not built (no MPI was found when this extension was built); "
                f"for it {mpi.HOW_TO_BUILD}")
    if importlib.util.find_spec("mpi4py") is None:
        return "clbuf.mpi: built with MPI, but mpi4py is not installed (pip install 'clbuf[mpi]')"
    return "clbuf.mpi: built with MPI; mpi4py is installed"


def info(args, out):
    """``clbuf info``: prints the devices, the selection and the picked device's transfer paths;
    CommandError where there is no device."""
    devices = clbuf.list_devices()
    print(f"clbuf {clbuf.__version__}, Python {sys.version.split()[0]}, numpy {np.__version__}",
          file=out)
    print(_mpi_line(), file=out)
    if not devices:
        print(clbuf.explain_selection(args.device).rstrip(), file=out)
        raise CommandError("no OpenCL device: install an OpenCL driver (Debian: pocl-opencl-icd "
                           "for the CPU) and check with clinfo -l")
    print(f"\nOpenCL devices ({len(devices)}):", file=out)
    for device in devices:
        print(f"  {device.platform_index}:{device.device_index}  {device.name} ({device.type}, "
              f"{device.platform}): global memory {_approximate(device.global_mem_bytes)}, "
              f"max allocation {_approximate(device.max_alloc_bytes)}", file=out)
    print("", file=out)
    print(clbuf.explain_selection(args.device).rstrip(), file=out)
    bm = _manager(args.device)
    try:
        device = bm.device
        print(f"\npicked: {device.platform_index}:{device.device_index} {device.name} "
              f"({device.type}, {device.platform})", file=out)
        print(f"  why:            {bm.selection_reason}", file=out)
        print(f"  memory model:   {bm.memory_model} ({MEMORY_MODELS.get(bm.memory_model, '?')})",
              file=out)
        print(f"  global memory:  {_approximate(device.global_mem_bytes)} "
              f"({device.global_mem_bytes} bytes)", file=out)
        print(f"  max allocation: {_approximate(device.max_alloc_bytes)} "
              f"({device.max_alloc_bytes} bytes)", file=out)
        fits = bm.memory_report()
        print(f"  clbuf holds:    {fits['buffers']} buffers ({_approximate(fits['buffers_bytes'])}"
              f"), pool {_approximate(fits['pool_cached_bytes'])}, pinned "
              f"{_approximate(fits['pinned_bytes'])} of {_approximate(fits['pinned_budget_bytes'])}",
              file=out)
        stream = fits["stream"]
        print(f"  a tile stream:  {stream['in_flight']} tiles in flight of "
              f"{stream['tile_elements']} float32 elements ({_approximate(stream['device_bytes'])}"
              f" of a {_approximate(stream['budget_bytes'])} budget)", file=out)
        print("  transfer paths (upload_to_device / download_from_device of a numpy array):",
              file=out)
        ranges = path_ranges(bm)
        rows = [(f"{format_size(first)} - {format_size(last)}", up, down)
                for first, last, up, down in ranges]
        width = max(len("size"), *(len(row[0]) for row in rows))
        print(f"    {'size':<{width}}  {'upload':<10}  download", file=out)
        for size, up, down in rows:
            print(f"    {size:<{width}}  {up:<10}  {down}", file=out)
        for path in sorted({p for _, _, up, down in ranges for p in (up, down)}):
            print(f"    {path}: {PATHS.get(path, '?')}", file=out)
    finally:
        bm.cleanup()
    return 0


class Progress:
    """A progress bar on stderr, drawn only where stderr is a terminal."""

    def __init__(self, total, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.total = max(1, total)
        self.done = 0
        self.shown = self.stream is not None and self.stream.isatty()  # None: stderr closed

    def step(self, label):
        """Counts one step done and redraws the bar with ``label``."""
        self.done += 1
        if self.shown:
            filled = 30 * self.done // self.total
            self.stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} "
                              f"{label:<32.32}")
            self.stream.flush()

    def close(self):
        """Clears the bar."""
        if self.shown:
            self.stream.write("\r" + " " * 80 + "\r")
            self.stream.flush()


def _pyopencl_queue(device):
    """A pyopencl context and in-order queue on clbuf's ``device``, or None without pyopencl."""
    if importlib.util.find_spec("pyopencl") is None:
        return None
    try:
        import pyopencl as cl

        platform = cl.get_platforms()[device.platform_index]
        peer = platform.get_devices()[device.device_index]
        context = cl.Context([peer])
        return cl.CommandQueue(context)
    except Exception as error:  # noqa: BLE001 (pyopencl's errors, an import that fails)
        raise CommandError(f"pyopencl cannot use the device ({type(error).__name__}: {error}); "
                           "--no-pyopencl measures clbuf alone") from None


def _methods(bm, queue):
    """{method: {op: (prepare(data) -> state, run(data, state) -> result, read(result) ->
    bytes)}}: every op of every method; run is timed, read checks what it made, untimed."""
    methods = {"clbuf": {
        "upload": (lambda a: None, lambda a, _: bm.upload_to_device(a),
                   lambda r: bm.download_from_device(r).tobytes()),
        "download": (bm.upload_to_device, lambda a, buffer: bm.download_from_device(buffer),
                     lambda r: r.tobytes()),
        "round_trip": (lambda a: None,
                       lambda a, _: bm.download_from_device(bm.upload_to_device(a), a.shape,
                                                            a.dtype),
                       lambda r: r.tobytes()),
    }}
    if queue is None:
        return methods
    import pyopencl as cl
    import pyopencl.array as cl_array

    context = queue.context
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR

    def buffer_upload(a, _):
        return cl.Buffer(context, flags, hostbuf=a)

    def buffer_download(a, buffer):
        out = np.empty_like(a)
        cl.enqueue_copy(queue, out, buffer)  # blocking
        return out

    def buffer_read(buffer):
        out = np.empty(buffer.size, np.uint8)
        cl.enqueue_copy(queue, out, buffer)
        return out.tobytes()

    methods["pyopencl Buffer"] = {
        "upload": (lambda a: None, buffer_upload, buffer_read),
        "download": (lambda a: buffer_upload(a, None), buffer_download, lambda r: r.tobytes()),
        "round_trip": (lambda a: None, lambda a, _: buffer_download(a, buffer_upload(a, None)),
                       lambda r: r.tobytes()),
    }
    methods["pyopencl Array"] = {
        "upload": (lambda a: None, lambda a, _: cl_array.to_device(queue, a),
                   lambda r: r.get().tobytes()),
        "download": (lambda a: cl_array.to_device(queue, a), lambda a, array: array.get(),
                     lambda r: r.tobytes()),
        "round_trip": (lambda a: None, lambda a, _: cl_array.to_device(queue, a).get(),
                       lambda r: r.tobytes()),
    }
    return methods


def _timed(run, data, state, read, expected):
    """Seconds of run(data, state) plus the release of what it made; what it made is checked
    against `expected` in between, off the clock."""
    clock = time.perf_counter
    start = clock()
    result = run(data, state)
    elapsed = clock() - start
    if read(result) != expected:
        raise CommandError("a transfer gave wrong bytes")
    start = clock()
    del result
    return elapsed + clock() - start


def measure(bm, queue, sizes, ops, repeat, budget_s, progress):
    """Medians of every op at every size by every method, interleaved: each repetition runs
    the methods in turn, starting one further along each time. Returns a list of dicts (op,
    bytes, method, repetitions, median_s)."""
    methods = _methods(bm, queue)
    names = list(methods)
    rng = np.random.default_rng()
    results = []
    for nbytes in sizes:
        for op in ops:
            data = rng.integers(1, 256, nbytes, dtype=np.uint8)
            expected = data.tobytes()
            states = {name: methods[name][op][0](data) for name in names}
            warm = {name: _timed(methods[name][op][1], data, states[name], methods[name][op][2],
                                 expected) for name in names}
            reps = repeat or int(min(1000.0, max(3.0, budget_s / max(sum(warm.values()), 1e-9))))
            times = {name: [] for name in names}
            for rep in range(reps):
                order = names[rep % len(names):] + names[:rep % len(names)]
                for name in order:
                    run, read = methods[name][op][1], methods[name][op][2]
                    times[name].append(_timed(run, data, states[name], read, expected))
            for name in names:
                results.append({"op": op, "bytes": nbytes, "method": name, "repetitions": reps,
                                "median_s": statistics.median(times[name])})
            del states
            progress.step(f"{op} {format_size(nbytes)}")
    return results


def _bandwidth(row):
    moved = row["bytes"] * (2 if row["op"] == "round_trip" else 1)
    return moved / row["median_s"] / 1e9


def _table(results, methods):
    by_key = {(r["op"], r["bytes"], r["method"]): r for r in results}
    header = ["op", "size", "reps", "clbuf", "GB/s"]
    for peer in methods[1:]:
        header += [peer, "ratio"]
    lines = [header]
    keys = sorted({(r["op"], r["bytes"]) for r in results}, key=lambda k: (OPS.index(k[0]), k[1]))
    for op, nbytes in keys:
        ours = by_key[(op, nbytes, "clbuf")]
        cells = [op, format_size(nbytes), str(ours["repetitions"]), format_time(ours["median_s"]),
                 f"{_bandwidth(ours):.2f}"]
        for peer in methods[1:]:
            theirs = by_key[(op, nbytes, peer)]
            cells += [format_time(theirs["median_s"]),
                      f"{ours['median_s'] / theirs['median_s']:.2f}x"]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
                     for line in lines)


class OutputFile:
    """A file named by --csv or --plot, opened for writing when the command starts, so that a
    path it cannot write (a missing folder, a directory, no permission, a full device) fails
    before anything is measured; written at the end by write(). A file it made is removed again
    by discard() (the run failed); a file that was there is left as it was until write()."""

    def __init__(self, option, path):
        self.option, self.path, self.created = option, path, False
        try:
            if path == "":
                raise FileNotFoundError(errno.ENOENT, "an empty path names no file")
            self.fd = self._open(path)
        except (OSError, ValueError) as error:
            raise CommandError(f"{option} {path!r}: cannot write there: {_reason(error)}") from None
        try:
            info = os.fstat(self.fd)
            self.regular = stat.S_ISREG(info.st_mode)
            self.identity = (info.st_dev, info.st_ino)
            # A write of 0 bytes fails where every write would (/dev/full) and changes nothing.
            os.write(self.fd, b"")
        except OSError as error:
            self.discard()
            raise CommandError(f"{option} {path!r}: cannot write there: {_reason(error)}") from None

    def _open(self, path):
        # Without O_CREAT first, to know whether this run made the file; O_NONBLOCK so that a
        # FIFO with no reader fails (ENXIO) instead of waiting, cleared after.
        flags = os.O_WRONLY | os.O_CLOEXEC
        try:
            fd = os.open(path, flags | os.O_NONBLOCK)
        except FileNotFoundError:
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:  # a dangling symbolic link: its target is made
                fd = os.open(path, flags | os.O_CREAT, 0o666)
            self.created = True
            return fd
        os.set_blocking(fd, True)
        return fd

    def discard(self):
        """Closes the file; removes it where this run made it (and it is still that file)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            if self.created:
                info = os.stat(self.path)
                if (info.st_dev, info.st_ino) == getattr(self, "identity", None):
                    os.unlink(self.path)
        except OSError:
            pass
        finally:
            os.close(fd)

    def write(self, writer, binary=False):
        """Writes the file from its start by writer(file object); CommandError if that fails
        (a file this run made is removed then)."""
        try:
            # `--csv /dev/stdout > file`: after the table, and what stdout prints next after it
            stdout = self.regular and self.identity == _identity_of(1)
            if stdout:
                os.lseek(self.fd, 0, os.SEEK_END)
            elif self.regular:
                os.ftruncate(self.fd, 0)
            mode = "wb" if binary else "w"
            kwargs = {} if binary else {"newline": "", "encoding": "utf-8"}
            with os.fdopen(os.dup(self.fd), mode, **kwargs) as f:
                writer(f)
            if stdout:
                os.lseek(1, 0, os.SEEK_END)
            os.close(self.fd)
            self.fd = None
        except OSError as error:
            self.discard()
            raise CommandError(f"{self.option} {self.path!r}: writing failed: "
                               f"{_reason(error)}") from None


def _identity_of(fd):
    """(device, inode) of the file open as `fd`, or None."""
    try:
        info = os.fstat(fd)
        return (info.st_dev, info.st_ino)
    except OSError:
        return None


def _reason(error):
    if isinstance(error, OSError) and error.strerror:
        return error.strerror + (f" (errno {error.errno})" if error.errno else "")
    return str(error)


def write_csv(path, results):
    """One row per op, size and method: median time, bandwidth and clbuf's time over it, into
    `path` (a path, or a text file object opened with newline="")."""
    import csv

    if isinstance(path, (str, bytes, os.PathLike)):
        with open(path, "w", newline="") as f:
            write_csv(f, results)
        return
    clbuf_time = {(r["op"], r["bytes"]): r["median_s"] for r in results if r["method"] == "clbuf"}
    writer = csv.writer(path)
    writer.writerow(["op", "bytes", "method", "repetitions", "median_us",
                     "gigabytes_per_second", "clbuf_ratio"])
    for r in results:
        writer.writerow([r["op"], r["bytes"], r["method"], r["repetitions"],
                         f"{r['median_s'] * 1e6:.3f}", f"{_bandwidth(r):.6g}",
                         f"{clbuf_time[(r['op'], r['bytes'])] / r['median_s']:.6g}"])


def write_plot(path, results, title):
    """Bandwidth against size, one panel an op, one line a method, as a PNG (matplotlib), into
    `path` (a path or a binary file object)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for op in OPS if any(r["op"] == op for r in results)]
    figure, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4), squeeze=False)
    for axis, op in zip(axes[0], ops):
        for method in dict.fromkeys(r["method"] for r in results):
            rows = sorted((r for r in results if r["op"] == op and r["method"] == method),
                          key=lambda r: r["bytes"])
            axis.plot([r["bytes"] for r in rows], [_bandwidth(r) for r in rows], marker="o",
                      label=method)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("bytes")
        axis.set_ylabel("GB/s (median)")
        axis.set_title(op.replace("_", " "))
        axis.grid(True, alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)


def _bench_settings(args):
    """bench's --sizes, --ops, --repeat and --budget, checked: (sizes, ops, repeat, budget_s);
    CommandError naming the option that is wrong."""
    try:
        sizes = list(dict.fromkeys(parse_size(s) for s in args.sizes.split(",") if s.strip()))
    except ValueError as error:
        raise CommandError(f"--sizes: {error}") from None
    if not sizes:
        raise CommandError(f"--sizes names no size: {args.sizes!r}")
    ops = list(dict.fromkeys(op.strip() for op in args.ops.split(",") if op.strip()))
    if not ops or any(op not in OPS for op in ops):
        raise CommandError(f"--ops takes {', '.join(OPS)}, not {args.ops!r}")
    try:
        repeat = int(args.repeat)
    except ValueError:
        repeat = -1
    if not 0 <= repeat <= MAX_REPEAT:
        raise CommandError(f"--repeat: {args.repeat!r} is not a whole number from 0 (as many as "
                           f"--budget allows) to {MAX_REPEAT}")
    try:
        budget = float(args.budget)
    except ValueError:
        budget = math.nan
    if not (math.isfinite(budget) and 0 < budget <= MAX_BUDGET_S):
        raise CommandError(f"--budget: {args.budget!r} is not a number of seconds above 0 and at "
                           f"most {MAX_BUDGET_S:g}")
    return sizes, ops, repeat, budget


def bench(args, out):
    """``clbuf bench``: checks every argument and opens --csv and --plot, then measures, prints
    the table and writes the files (removed again where the run fails and this run made them)."""
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise CommandError("--plot needs matplotlib, which is not installed (pip install "
                           "matplotlib; Debian: apt install python3-matplotlib)")
    settings = _bench_settings(args)
    files = {}
    try:
        for option, path in (("--csv", args.csv), ("--plot", args.plot)):
            if path is not None:
                files[option] = OutputFile(option, path)
        if len(files) == 2 and files["--csv"].identity == files["--plot"].identity:
            raise CommandError(f"--csv {args.csv!r} and --plot {args.plot!r} are one file")
        return _bench(args, out, *settings, files)
    finally:
        for file in files.values():
            file.discard()  # nothing left to do for a file written


def _bench(args, out, sizes, ops, repeat, budget, files):
    if not clbuf.list_devices():
        raise CommandError("no OpenCL device: install an OpenCL driver (Debian: pocl-opencl-icd "
                           "for the CPU) and check with clinfo -l")
    bm = _manager(args.device)
    try:
        device = bm.device
        too_large = [s for s in sizes if s > device.max_alloc_bytes]
        if too_large:
            raise CommandError(f"--sizes: {format_size(too_large[0])} is more than the device's "
                               f"largest allocation ({format_size(device.max_alloc_bytes)})")
        queue = None if args.no_pyopencl else _pyopencl_queue(device)
        peers = "pyopencl Buffer and Array" if queue is not None else (
            "no peer: pyopencl is not installed" if not args.no_pyopencl else "no peer")
        title = f"{device.name} ({device.type}, {device.platform})"
        print(f"device: {title}, memory model {bm.memory_model}", file=out)
        print(f"clbuf {clbuf.__version__} against {peers}; medians, ratio = clbuf time / pyopencl "
              "time (below 1: clbuf is faster)", file=out)
        progress = Progress(len(sizes) * len(ops))
        try:
            results = measure(bm, queue, sizes, ops, repeat, budget, progress)
        finally:
            progress.close()
    finally:
        bm.cleanup()
    methods = list(dict.fromkeys(r["method"] for r in results))
    print(_table(results, methods), file=out)
    out.flush()  # before the files: --csv /dev/stdout comes after the table
    if "--csv" in files:
        files["--csv"].write(lambda f: write_csv(f, results))
        print(f"csv: {args.csv}", file=out)
    if "--plot" in files:
        files["--plot"].write(lambda f: write_plot(f, results, title), binary=True)
        print(f"plot: {args.plot}", file=out)
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a command line it cannot read raises UsageError: one line and
    status 1 as every other failure, not argparse's usage text and status 2."""

    def error(self, message):
        raise UsageError(self.prog, message)


def _parser():
    parser = _Parser(prog="clbuf", description="clbuf's OpenCL devices and transfer speed.")
    parser.add_argument("--version", action="version", version=f"clbuf {clbuf.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.required = True
    device_help = ("the device: gpu, cpu, accelerator, P:D or part of its name (default: "
                   "CLBUF_DEVICE, else the first GPU, else the first CPU device)")
    info_parser = commands.add_parser(
        "info", help="the OpenCL devices, the one clbuf picks and its transfer paths")
    info_parser.add_argument("--device", help=device_help)
    bench_parser = commands.add_parser(
        "bench", help="upload, download and round trip, clbuf against pyopencl")
    bench_parser.add_argument("--device", help=device_help)
    bench_parser.add_argument("--sizes", default="4,1K,64K,1M,16M,256M",
                              help="comma-separated sizes, K/M/G = 1024 (default: %(default)s)")
    bench_parser.add_argument("--ops", default=",".join(OPS),
                              help="comma-separated ops (default: %(default)s)")
    bench_parser.add_argument("--repeat", metavar="N", default="0",
                              help=f"timed repetitions of each method, 1 to {MAX_REPEAT} "
                                   "(default 0: as many as take about --budget seconds, 3 to "
                                   "1000)")
    bench_parser.add_argument("--budget", metavar="SECONDS", default="0.3",
                              help="seconds per op and size when --repeat is not given, above 0 "
                                   f"and at most {MAX_BUDGET_S:g} (default: %(default)s)")
    bench_parser.add_argument("--no-pyopencl", action="store_true",
                              help="clbuf alone, even where pyopencl is installed")
    bench_parser.add_argument("--csv", metavar="FILE", help="write the results as CSV")
    bench_parser.add_argument("--plot", metavar="FILE",
                              help="write a PNG of bandwidth against size (needs matplotlib)")
    return parser


class _Stdout:
    """Where the commands print: standard output, whose failed write (a full disk, a closed
    pipe) raises OutputLost for main() to report once; where it is closed (None), nothing."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text):
        if self.stream is None:
            return len(text)
        try:
            return self.stream.write(text)
        except OSError as error:
            raise OutputLost(error) from None

    def flush(self):
        if self.stream is not None:
            try:
                self.stream.flush()
            except OSError as error:
                raise OutputLost(error) from None


def _silence_stdout():
    """Points standard output at /dev/null, so that the interpreter's last flush of what is
    still buffered does not fail again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


def _fail(command, message, out, status=1):
    """Says `command: message` on stderr after what the command printed; returns `status`."""
    try:
        out.flush()
    except OutputLost:
        _silence_stdout()
    if sys.stderr is not None:
        try:
            print(f"{command}: {message}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
    return status


def main(argv=None):
    """Runs the ``clbuf`` command with ``argv`` (default: the command line); returns its exit
    status: 0, or 1 for any failure, a wrong command line included, said in one line on stderr
    (``clbuf bench: <message>``); 130 when interrupted (Ctrl-C)."""
    out = _Stdout(sys.stdout)
    command = "clbuf"
    try:
        args, extra = _parser().parse_known_args(argv)
        command = f"clbuf {args.command}"
        if extra:  # argparse would say so as the top-level "clbuf"; they are the command's
            raise UsageError(command, f"unrecognized arguments: {' '.join(extra)}")
        status = {"info": info, "bench": bench}[args.command](args, out)
        out.flush()
        return status
    except UsageError as error:
        return _fail(error.prog, error, out)
    except (CommandError, clbuf.Error) as error:
        return _fail(command, error, out)
    except (OutputLost, BrokenPipeError) as error:
        _silence_stdout()
        lost = error.error if isinstance(error, OutputLost) else error
        if lost.errno == errno.EPIPE:
            return 1  # `clbuf info | head`: the reader left; nothing more to say
        return _fail(command, f"cannot write the output: {_reason(lost)}", out)
    except MemoryError:
        return _fail(command, "out of host memory", out)
    except KeyboardInterrupt:
        return _fail(command, "interrupted", out, status=130)
    except SystemExit as done:  # --help, --version: what argparse printed must reach stdout
        try:
            out.flush()
        except OutputLost as lost:
            _silence_stdout()
            if lost.error.errno != errno.EPIPE:
                return _fail(command, f"cannot write the output: {_reason(lost.error)}", out)
            return 1
        return done.code
    except Exception as error:  # a fault of the command itself: one line too, with its type
        return _fail(command, f"unexpected {type(error).__name__}: {error}", out)
