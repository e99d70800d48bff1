#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The table of bench/ab.sh: before against after, per tool, memory model, operation and size.

    bench/ab_report.py [--threshold 1.03] OUT_DIR

Reads OUT_DIR/{before,after}/round-N/<tool>-<memory>.csv. Each CSV row is already one run's
median (clbuf_bench: median_us; mpi_bench: pingpong_us per ping-pong, and for stream and
allreduce rows the time from GB/s, bytes / GB/s; halo rows: us per exchange). For every (tool,
memory, operation, size) the report takes each side's median over rounds and prints
after / before (above 1: after slower). The verdict line counts only rows that run clbuf's code;
the control rows (MPI on host memory, the plain interior kernel) get their own line, as a
measure of the noise between runs.
"""
import argparse
import csv
import pathlib
import re
import statistics
import sys

TOOLS = ["clbuf_bench", "mpi_bench", "mpi_halo"]
MEMORIES = ["default", "discrete"]
# mpi_bench methods that do not touch clbuf: MPI on host memory and the kernel alone.
CONTROL = re.compile(r"(^|_)(host|host_huge|host_pack|kernel)$")


def size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def time_us(value):
    return float(value) if value not in ("", None) else None


def from_gbs(nbytes, gbs):
    """Microseconds for nbytes at gbs GB/s (1e9 B/s); None where not measured."""
    if gbs in ("", None) or float(gbs) <= 0:
        return None
    return nbytes / float(gbs) / 1e3


def read_csv(path, tool):
    """Yields (operation, bytes, microseconds) from one run's CSV."""
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if tool == "clbuf_bench":
                if row.get("ok", "1") != "1":
                    continue
                op = row["op"] if row["method"] == "clbuf" else f"{row['op']}/{row['method']}"
                yield op, int(row["bytes"]), time_us(row["median_us"])
                continue
            nbytes, method = int(row["bytes"]), row["method"]
            if method.startswith("allreduce_"):
                yield method, nbytes, from_gbs(nbytes, row["pingpong_gbs"])
            elif method.startswith("halo"):
                yield method, nbytes, time_us(row["pingpong_us"])
            else:
                yield f"pingpong_{method}", nbytes, time_us(row["pingpong_us"])
                yield f"stream_{method}", nbytes, from_gbs(nbytes, row["stream_gbs"])


def collect(out):
    """{(tool, memory, op, bytes): {side: [per-run medians]}} and the order operations came in."""
    data, order = {}, {}
    pattern = re.compile(r"^(?P<tool>[a-z_]+)-(?P<memory>[a-z]+)\.csv$")
    for side in ("before", "after"):
        for path in sorted((out / side).glob("round-*/*.csv")):
            m = pattern.match(path.name)
            if not m:
                continue
            tool, memory = m["tool"], m["memory"]
            for op, nbytes, us in read_csv(path, tool):
                if us is None:
                    continue
                order.setdefault((tool, memory, op), len(order))
                data.setdefault((tool, memory, op, nbytes), {}).setdefault(side, []).append(us)
    return data, order


def fmt_us(us):
    return f"{us:.3g}" if us < 100 else f"{us:.0f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="bench/ab.sh's OUT_DIR")
    parser.add_argument("--threshold", type=float, default=1.03)
    args = parser.parse_args()
    data, order = collect(args.out)
    if not data:
        print(f"ab_report: no CSV under {args.out}/{{before,after}}/round-*/", file=sys.stderr)
        return 2

    def rank(key):
        tool, memory, op, nbytes = key
        return (TOOLS.index(tool) if tool in TOOLS else len(TOOLS), tool,
                MEMORIES.index(memory) if memory in MEMORIES else len(MEMORIES), memory,
                order[(tool, memory, op)], nbytes)

    worst = {False: (0.0, None), True: (0.0, None)}  # control? -> (ratio, row)
    over = {False: 0, True: 0}
    rows = {False: 0, True: 0}
    section = None
    for key in sorted(data, key=rank):
        tool, memory, op, nbytes = key
        if (tool, memory) != section:
            section = (tool, memory)
            print(f"\n### {tool}, memory {memory} (us, median over rounds of each run's median)\n")
            print("| operation | size | before | after | after/before | rounds |")
            print("|---|---:|---:|---:|---:|---:|")
        sides = data[key]
        b, a = sides.get("before"), sides.get("after")
        med_b = statistics.median(b) if b else None
        med_a = statistics.median(a) if a else None
        control = bool(CONTROL.search(op))
        label = f"{op} (control)" if control else op
        ratio_text = "–"
        if med_b and med_a:
            ratio = med_a / med_b
            rows[control] += 1
            if ratio > args.threshold:
                over[control] += 1
            if ratio > worst[control][0]:
                worst[control] = (ratio, f"{tool} {memory} {op} {size_name(nbytes)}")
            ratio_text = f"**{ratio:.3f}**" if ratio > args.threshold else f"{ratio:.3f}"
        counts = f"{len(b or [])}/{len(a or [])}"
        print(f"| {label} | {size_name(nbytes)} | {fmt_us(med_b) if med_b else '–'} | "
              f"{fmt_us(med_a) if med_a else '–'} | {ratio_text} | {counts} |")
    print()
    for control, what in ((True, "controls (no clbuf code)"), (False, "clbuf rows")):
        ratio, where = worst[control]
        if rows[control]:
            print(f"{what}: worst after/before {ratio:.3f} ({where}); {over[control]} of "
                  f"{rows[control]} above {args.threshold}")
    verdict = "yes" if rows[False] and over[False] == 0 else "no"
    print(f"not slower (every clbuf ratio <= {args.threshold}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
