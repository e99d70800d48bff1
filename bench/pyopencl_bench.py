#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""pyopencl peer for clbuf_bench: the same operations, sizes, rules and CSV schema.

Methods:
  pyopencl_buffer  cl.Buffer(COPY_HOST_PTR) for fresh uploads, cl.enqueue_copy otherwise
  pyopencl_array   pyopencl.array: to_device, .set, .get, dst[:] = src

Both methods run interleaved after warm-up; each repetition is checked byte-exactly outside
the timed region; objects an operation creates are released on the clock (as in clbuf_bench).

  /usr/bin/python3 bench/pyopencl_bench.py [--device SEL] [--sizes 4,4K,...] [--ops a,b]
                                           [--gib] [--smoke] [--csv PATH] [--target-s 0.3]
"""
import argparse
import gc
import os
import sys
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array

KiB, MiB, GiB = 1024, 1024**2, 1024**3
ALL_OPS = ["upload_fresh", "upload_existing", "download_caller", "download_new", "d2d_copy",
           "roundtrip_seed", "upload_fresh_repeat_64MiB"]
METHODS = ["pyopencl_buffer", "pyopencl_array"]
MF = cl.mem_flags


def parse_size(s):
    s = s.strip().upper()
    for suffix, mult in (("GIB", GiB), ("GB", GiB), ("G", GiB), ("MIB", MiB), ("MB", MiB),
                         ("M", MiB), ("KIB", KiB), ("KB", KiB), ("K", KiB), ("B", 1)):
        if s.endswith(suffix):
            return int(float(s[: -len(suffix)]) * mult)
    return int(s)


def size_name(b):
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if b >= unit and b % unit == 0:
            return f"{b // unit} {name}"
    return f"{b} B"


def select_device(selector):
    """clbuf's grammar: gpu, cpu, accelerator, P:D, or a case-insensitive name substring.
    Default (no selector, no CLBUF_DEVICE): first GPU of the first platform that has one,
    else the first CPU, else any device."""
    devices = []  # (p, d, device) in list_devices() order
    for p, plat in enumerate(cl.get_platforms()):
        try:
            devs = plat.get_devices()
        except cl.Error:
            devs = []
        for d, dev in enumerate(devs):
            devices.append((p, d, dev))
    if not devices:
        sys.exit("pyopencl_bench: no OpenCL device")
    kinds = {"gpu": cl.device_type.GPU, "cpu": cl.device_type.CPU,
             "accelerator": cl.device_type.ACCELERATOR}
    if not selector:
        for kind in ("gpu", "cpu"):
            for _, _, dev in devices:
                if dev.type & kinds[kind]:
                    return dev
        return devices[0][2]
    sel = selector.strip().lower()
    if sel in kinds:
        for _, _, dev in devices:
            if dev.type & kinds[sel]:
                return dev
    elif ":" in sel and all(x.isdigit() for x in sel.split(":", 1)):
        p, d = (int(x) for x in sel.split(":", 1))
        for pp, dd, dev in devices:
            if (pp, dd) == (p, d):
                return dev
    else:
        for _, _, dev in devices:
            if sel in dev.name.lower():
                return dev
    sys.exit(f"pyopencl_bench: no device matches {selector!r}")


def random_nonzero(count, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 256, size=count * 4, dtype=np.uint8).view(np.float32)


def same(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


class Env:
    def __init__(self, dev):
        self.ctx = cl.Context([dev])
        self.queue = cl.CommandQueue(self.ctx)
        self.scratch = None

    def device_equals(self, buf, want):
        if self.scratch is None or self.scratch.size < want.size:
            self.scratch = np.empty(want.size, np.float32)
        view = self.scratch[: want.size]
        view.fill(0)
        cl.enqueue_copy(self.queue, view, buf, is_blocking=True)
        return same(view, want)

    def make_buffer(self, content):
        return cl.Buffer(self.ctx, MF.READ_WRITE | MF.COPY_HOST_PTR, hostbuf=content)


class Case:
    """prepare(p) untimed, run(p) timed, verify(p) untimed, release() timed."""

    def __init__(self, run, verify, prepare=None, release=None):
        self.run, self.verify, self.prepare, self.release = run, verify, prepare, release


def make_case(env, method, op, count, src):
    q, ctx = env.queue, env.ctx
    st = {}
    nbytes = count * 4

    def release_out():
        st.pop("out", None)

    if method == "pyopencl_buffer":
        if op in ("upload_fresh", "upload_fresh_repeat_64MiB"):
            def run(p):
                st["out"] = cl.Buffer(ctx, MF.READ_WRITE | MF.COPY_HOST_PTR, hostbuf=src[p])
            return Case(run, lambda p: env.device_equals(st["out"], src[p]), release=release_out)
        if op == "upload_existing":
            dst = cl.Buffer(ctx, MF.READ_WRITE, nbytes)
            return Case(lambda p: cl.enqueue_copy(q, dst, src[p], is_blocking=True),
                        lambda p: env.device_equals(dst, src[p]))
        if op in ("download_caller", "download_new", "d2d_copy"):
            dsrc = [env.make_buffer(src[0]), env.make_buffer(src[1])]
            if op == "download_caller":
                out = np.empty(count, np.float32)
                return Case(lambda p: cl.enqueue_copy(q, out, dsrc[p], is_blocking=True),
                            lambda p: same(out, src[p]), prepare=lambda p: out.fill(0))
            if op == "download_new":
                def run(p):
                    o = np.empty(count, np.float32)
                    cl.enqueue_copy(q, o, dsrc[p], is_blocking=True)
                    st["out"] = o
                return Case(run, lambda p: same(st["out"], src[p]), release=release_out)
            dst = cl.Buffer(ctx, MF.READ_WRITE, nbytes)

            def run(p):
                cl.enqueue_copy(q, dst, dsrc[p])
                q.finish()
            return Case(run, lambda p: env.device_equals(dst, src[p]))
        if op == "roundtrip_seed":
            def run(p):
                b = cl.Buffer(ctx, MF.READ_WRITE | MF.COPY_HOST_PTR, hostbuf=src[p])
                o = np.empty(count, np.float32)
                cl.enqueue_copy(q, o, b, is_blocking=True)
                st["out"] = o
            return Case(run, lambda p: same(st["out"], src[p]), release=release_out)

    if method == "pyopencl_array":
        if op in ("upload_fresh", "upload_fresh_repeat_64MiB"):
            def run(p):
                st["out"] = cl_array.to_device(q, src[p])
            return Case(run, lambda p: env.device_equals(st["out"].data, src[p]),
                        release=release_out)
        if op == "upload_existing":
            dst = cl_array.empty(q, count, np.float32)
            return Case(lambda p: dst.set(src[p]), lambda p: env.device_equals(dst.data, src[p]))
        if op in ("download_caller", "download_new", "d2d_copy"):
            dsrc = [cl_array.to_device(q, src[0]), cl_array.to_device(q, src[1])]
            if op == "download_caller":
                out = np.empty(count, np.float32)
                return Case(lambda p: dsrc[p].get(ary=out), lambda p: same(out, src[p]),
                            prepare=lambda p: out.fill(0))
            if op == "download_new":
                def run(p):
                    st["out"] = dsrc[p].get()
                return Case(run, lambda p: same(st["out"], src[p]), release=release_out)
            dst = cl_array.empty(q, count, np.float32)

            def run(p):
                dst[:] = dsrc[p]  # pyopencl runs a copy kernel here
                q.finish()
            return Case(run, lambda p: env.device_equals(dst.data, src[p]))
        if op == "roundtrip_seed":
            def run(p):
                st["out"] = cl_array.to_device(q, src[p]).get()
            return Case(run, lambda p: same(st["out"], src[p]), release=release_out)
    raise ValueError(f"unknown method/op {method}/{op}")


def quantile(xs, qq):
    return float(np.quantile(np.asarray(xs), qq)) if xs else 0.0


def run_one(env, args, op, nbytes):
    count = nbytes // 4
    src = [random_nonzero(count, 2 * count + 1), random_nonzero(count, 2 * count + 2)]
    results = []
    cases = []
    for m in args.methods:
        r = {"op": op, "bytes": nbytes, "method": m, "us": [], "ok": True, "error": ""}
        try:
            cases.append(make_case(env, m, op, count, src))
        except Exception as e:  # noqa: BLE001 - report and continue
            cases.append(None)
            r["ok"], r["error"] = False, f"setup: {e}"
        results.append(r)

    def step(i, p):
        c = cases[i]
        if c.prepare:
            c.prepare(p)
        t0 = time.perf_counter()
        c.run(p)
        t = time.perf_counter() - t0
        if not c.verify(p):
            raise RuntimeError("result differs from the source data")
        if c.release:
            t0 = time.perf_counter()
            c.release()
            t += time.perf_counter() - t0
        return t

    warmup = 1 if args.smoke or nbytes >= 64 * MiB else 3
    min_reps = 3 if args.smoke else args.min_reps
    max_reps = 3 if args.smoke else args.max_reps
    target = 0.0 if args.smoke else args.target_s
    spent = [0.0] * len(cases)
    for w in range(warmup):
        for i, r in enumerate(results):
            if r["ok"]:
                try:
                    step(i, w & 1)
                except Exception as e:  # noqa: BLE001
                    r["ok"], r["error"] = False, f"warm-up: {e}"
    gc.disable()  # no collector pauses inside the timed loop (objects are freed by refcount)
    start = time.perf_counter()
    rep = 0
    while True:
        more = False
        for k in range(len(cases)):
            i = (k + rep) % len(cases)
            r = results[i]
            if not r["ok"]:
                continue
            n = len(r["us"])
            if n >= max_reps:
                continue
            if n >= min_reps and (spent[i] >= target
                                  or time.perf_counter() - start > args.case_budget_s):
                continue
            more = True
            try:
                t = step(i, rep & 1)
                spent[i] += t
                r["us"].append(t * 1e6)
            except Exception as e:  # noqa: BLE001
                r["ok"], r["error"] = False, str(e)
        rep += 1
        if not more:
            break
    gc.enable()
    del cases
    gc.collect()
    return results


def rss_roundtrip(dev, method, nbytes):
    """One round trip (fresh upload, download into a new array) and nothing else."""
    env = Env(dev)
    count = nbytes // 4
    src = random_nonzero(count, 7)
    if method == "none":
        back = src.copy()
    elif method == "pyopencl_buffer":
        b = cl.Buffer(env.ctx, MF.READ_WRITE | MF.COPY_HOST_PTR, hostbuf=src)
        back = np.empty(count, np.float32)
        cl.enqueue_copy(env.queue, back, b, is_blocking=True)
    elif method == "pyopencl_array":
        back = cl_array.to_device(env.queue, src).get()
    else:
        sys.exit(f"pyopencl_bench: unknown method {method}")
    ok = same(back, src)
    print(f"rss_roundtrip method={method} bytes={nbytes} ok={int(ok)}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default=os.environ.get("CLBUF_DEVICE", ""))
    ap.add_argument("--sizes", default="4,4K,64K,1M,16M,256M")
    ap.add_argument("--ops", default=",".join(ALL_OPS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--gib", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--csv", default="")
    ap.add_argument("--target-s", type=float, default=0.3)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--max-reps", type=int, default=2000)
    ap.add_argument("--case-budget-s", type=float, default=40.0)
    ap.add_argument("--rss-roundtrip", default="",
                    help="none|pyopencl_buffer|pyopencl_array: one round trip only, for time -v")
    ap.add_argument("--rss-bytes", default="256M")
    args = ap.parse_args()
    if args.rss_roundtrip:
        return rss_roundtrip(select_device(args.device), args.rss_roundtrip,
                             parse_size(args.rss_bytes))
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    if args.smoke and "--sizes" not in sys.argv:
        sizes = [4, 4 * KiB]
    if args.gib:
        sizes.append(GiB)
    args.methods = [m for m in args.methods.split(",") if m]
    ops = [o for o in args.ops.split(",") if o]
    for o in ops:
        if o not in ALL_OPS:
            sys.exit(f"pyopencl_bench: unknown operation {o}")

    dev = select_device(args.device)
    env = Env(dev)
    print(f"# device: {dev.platform.name} / {dev.name}; pyopencl {cl.VERSION_TEXT}")
    print(f"{'operation':<26} {'size':>9}  {'method':<16} {'reps':>6} {'median_us':>12} "
          f"{'q1_us':>12} {'q3_us':>12} {'GB/s':>9}")
    rows = []
    failed = False
    for op in ops:
        op_sizes = sizes
        if op == "roundtrip_seed":
            op_sizes = [4000]
        elif op == "upload_fresh_repeat_64MiB":
            if args.smoke:
                continue
            op_sizes = [64 * MiB]
        for nbytes in op_sizes:
            for r in run_one(env, args, op, nbytes):
                if not r["ok"]:
                    failed = True
                    print(f"{op:<26} {size_name(nbytes):>9}  {r['method']:<16} FAILED: {r['error']}")
                    rows.append((op, nbytes, r["method"], 0, 0, 0, 0, 0, 0))
                    continue
                med = quantile(r["us"], 0.5)
                gb = nbytes / (med * 1e3) if med > 0 else 0
                q1, q3 = quantile(r["us"], 0.25), quantile(r["us"], 0.75)
                print(f"{op:<26} {size_name(nbytes):>9}  {r['method']:<16} {len(r['us']):>6} "
                      f"{med:>12.2f} {q1:>12.2f} {q3:>12.2f} {gb:>9.3f}", flush=True)
                rows.append((op, nbytes, r["method"], len(r["us"]), med, q1, q3, gb, 1))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("op,bytes,method,reps,median_us,q1_us,q3_us,gbps,ok,device\n")
            for row in rows:
                f.write(",".join(str(x) for x in row) + f',"{dev.name}"\n')
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
