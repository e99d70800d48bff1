#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Merge clbuf_bench and pyopencl_bench CSVs, print the table of medians and ratios, write
results/benchmark.csv, results/table.md and PNG plots of bandwidth against size (gnuplot); where
clbuf and a CLHPP peer both ran, also results/every_size.md (clbuf/best and clbuf/naive per
operation and size, "never slower" verdict) and results/ratio_vs_best.png (those ratios against
size).

  /usr/bin/python3 bench/report.py --out bench/results clbuf.csv pyopencl.csv [--rss rss.csv]

Ratios are clbuf time / peer time (lower is better for clbuf). clbuf and the C++ peers ran
interleaved in one process; pyopencl ran in its own process right after, so its ratios carry
the machine's drift between the two runs.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
from collections import OrderedDict

OP_ORDER = ["upload_fresh", "upload_existing", "download_caller", "download_new", "d2d_copy",
            "roundtrip_seed", "upload_fresh_repeat_64MiB", "upload_pinned", "download_pinned",
            "upload_async", "download_async"]
OP_TITLE = {
    "upload_fresh": "upload into a fresh buffer",
    "upload_existing": "upload into an existing buffer",
    "download_caller": "download into caller memory",
    "download_new": "download into a new vector",
    "d2d_copy": "device-to-device copy",
    "roundtrip_seed": "seed round trip (1000 float32, fresh buffer, up and back)",
    "upload_fresh_repeat_64MiB": "repeated upload of a fresh 64 MiB buffer (pool target)",
    "upload_pinned": "upload from pinned host memory",
    "download_pinned": "download into pinned host memory",
    "upload_async": "asynchronous upload (pageable), waited",
    "download_async": "asynchronous download (pageable), waited",
}
METHOD_ORDER = ["clbuf", "clhpp_naive", "clhpp_best", "boost_compute", "pyopencl_buffer",
                "pyopencl_array", "memcpy"]
PEERS = METHOD_ORDER[1:]
SHORT = {"clhpp_naive": "naive", "clhpp_best": "best", "boost_compute": "boost",
         "pyopencl_buffer": "pycl.buf", "pyopencl_array": "pycl.arr", "memcpy": "memcpy"}
RATIO_PEERS = ["clhpp_best", "clhpp_naive"]  # every_size.md and ratio_vs_best.png
NOISE = 1.03  # a ratio up to this counts as "not slower" (run-to-run noise of the medians)


def size_name(b):
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if b >= unit and b % unit == 0:
            return f"{b // unit} {name}"
    return f"{b} B"


def load(paths):
    rows = []
    for p in paths:
        if not os.path.exists(p):
            print(f"report: {p} missing, skipped", file=sys.stderr)
            continue
        with open(p) as f:
            for r in csv.DictReader(f):
                r["bytes"] = int(r["bytes"])
                r["median_us"] = float(r["median_us"])
                r["gbps"] = float(r["gbps"])
                r["ok"] = r.get("ok", "1") in ("1", "True", "true")
                rows.append(r)
    return rows


def index(rows):
    data = OrderedDict()  # (op, bytes) -> {method: row}
    key = lambda r: (OP_ORDER.index(r["op"]) if r["op"] in OP_ORDER else 99, r["bytes"])
    for r in sorted(rows, key=key):
        data.setdefault((r["op"], r["bytes"]), {})[r["method"]] = r
    return data


def fmt_us(x):
    return f"{x:.1f}" if x < 1e5 else f"{x:.3g}"


def ratio(a, b):
    if a and b and a["ok"] and b["ok"] and b["median_us"] > 0:
        return a["median_us"] / b["median_us"]
    return None


def print_tables(data, methods, peers):
    w = 10
    head = f"{'operation':<26} {'size':>8} " + "".join(f"{SHORT.get(m, m)[:w]:>{w}}" for m in methods)
    head += "  | clbuf/" + " clbuf/".join(SHORT[p] for p in peers)
    print("median time, microseconds (lower is better) and clbuf/peer time ratios")
    print(head)
    print("-" * len(head))
    for (op, b), ms in data.items():
        line = f"{op:<26} {size_name(b):>8} "
        for m in methods:
            r = ms.get(m)
            line += f"{(fmt_us(r['median_us']) if r and r['ok'] else '-'):>{w}}"
        line += "  |"
        for p in peers:
            q = ratio(ms.get("clbuf"), ms.get(p))
            line += f" {('%.2f' % q) if q is not None else '-':>{len('clbuf/' + SHORT[p])}}"
        print(line)
    print()
    print("bandwidth, GB/s (payload bytes / median time)")
    head = f"{'operation':<26} {'size':>8} " + "".join(f"{SHORT.get(m, m)[:w]:>{w}}" for m in methods)
    print(head)
    print("-" * len(head))
    for (op, b), ms in data.items():
        line = f"{op:<26} {size_name(b):>8} "
        for m in methods:
            r = ms.get(m)
            line += f"{('%.3f' % r['gbps']) if r and r['ok'] else '-':>{w}}"
        print(line)


def write_markdown(path, data, methods, peers, device):
    with open(path, "w") as f:
        f.write(f"Device: {device}. Median time in µs; ratio = clbuf time / peer time "
                "(below 1: clbuf is faster).\n\n")
        f.write("| operation | size | " + " | ".join(methods) + " | "
                + " | ".join(f"clbuf/{SHORT[p]}" for p in peers) + " |\n")
        f.write("|---|---:|" + "---:|" * (len(methods) + len(peers)) + "\n")
        for (op, b), ms in data.items():
            cells = [op, size_name(b)]
            for m in methods:
                r = ms.get(m)
                cells.append(fmt_us(r["median_us"]) if r and r["ok"] else "–")
            for p in peers:
                q = ratio(ms.get("clbuf"), ms.get(p))
                cells.append(f"{q:.2f}" if q is not None else "–")
            f.write("| " + " | ".join(cells) + " |\n")


def ratio_ops(data, peer):
    """{op: [(bytes, clbuf/peer)]} for every op where both ran and succeeded."""
    out = OrderedDict()
    for (op, b), ms in data.items():
        q = ratio(ms.get("clbuf"), ms.get(peer))
        if q is not None:
            out.setdefault(op, []).append((b, q))
    return out


def write_every_size(path, data, device):
    """Op x size table of clbuf/best and clbuf/naive; each row's worst bold; the verdict line."""
    peers = [p for p in RATIO_PEERS if ratio_ops(data, p)]
    if not peers:
        return None
    sizes = sorted({b for (_, b) in data})
    ops = list(OrderedDict.fromkeys(op for (op, _) in data))
    worst = None  # (ratio, op, bytes, peer) over every cell
    lines = [f"Device: {device}. Ratio = clbuf median time / peer median time (below 1: clbuf "
             f"is faster; up to {NOISE} counts as noise); worst of each row in bold; – = not "
             "measured.", "",
             "| operation | clbuf/ | " + " | ".join(size_name(b) for b in sizes) + " | worst |",
             "|---|---|" + "---:|" * (len(sizes) + 1)]
    for op in ops:
        for p in peers:
            qs = {b: ratio(data.get((op, b), {}).get("clbuf"), data.get((op, b), {}).get(p))
                  for b in sizes}
            known = [(q, b) for b, q in qs.items() if q is not None]
            if not known:
                continue
            qw, bw = max(known)
            if worst is None or qw > worst[0]:
                worst = (qw, op, bw, p)
            cells = ["–" if qs[b] is None else (f"**{qs[b]:.2f}**" if b == bw else f"{qs[b]:.2f}")
                     for b in sizes]
            lines.append(f"| {op} | {SHORT[p]} | " + " | ".join(cells)
                         + f" | {qw:.2f} ({size_name(bw)}) |")
    q, op, b, p = worst
    verdict = (f"never slower: {'yes' if q <= NOISE else 'no'} (worst: {op} {size_name(b)} "
               f"{q:.2f} against {SHORT[p]})")
    lines += ["", verdict]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return verdict


def plot_ratios(out, data):
    """ratio_vs_best.png: clbuf/peer time against size, one panel per peer, one line per op."""
    if not shutil.which("gnuplot"):
        return
    panels = [(p, ratio_ops(data, p)) for p in RATIO_PEERS]
    panels = [(p, r) for p, r in panels if r]
    if not panels:
        return
    datdir = os.path.join(out, ".ratiodata")
    os.makedirs(datdir, exist_ok=True)
    ops = list(OrderedDict.fromkeys(op for (op, _) in data))
    colours = ["#9400d3", "#009e73", "#56b4e9", "#e69f00", "#c8b400", "#0072b2", "#e51e10",
               "#8b4513", "#ff69b4", "#708090", "#2f4f4f"]
    xs = sorted({b for (_, b) in data})
    tics = sorted({b for (op, b) in data if op != "roundtrip_seed"}) or xs  # seed: 4000 B only
    script = [f"set terminal pngcairo noenhanced size 1200,{560 * len(panels)}",
              f"set output '{os.path.join(out, 'ratio_vs_best.png')}'",
              f"set multiplot layout {len(panels)},1"]
    for p, per_op in panels:
        qs = [q for pts in per_op.values() for _, q in pts]
        lo, hi = min(qs + [0.9]), max(qs + [NOISE])
        parts = []
        for op, pts in per_op.items():
            i = ops.index(op)
            fn = os.path.join(datdir, f"{p}.{op}.dat")
            with open(fn, "w") as f:
                f.write("".join(f"{b} {q}\n" for b, q in sorted(pts)))
            title = op if op != "roundtrip_seed" else f"{op} ({size_name(pts[0][0])})"
            parts.append(f"'{fn}' using 1:2 with linespoints lw 2 pt {4 + i % 6} ps 1.2 "
                         f"lc rgb '{colours[i % len(colours)]}' title '{title}'")
        parts.append("1 with lines lw 1.5 lc rgb 'black' title '1.0 (as fast)'")
        parts.append(f"{NOISE} with lines lw 1.5 dt 2 lc rgb 'red' title '{NOISE} (noise allowance)'")
        script += [f'set title "clbuf time / {p} time (below 1: clbuf faster)"',
                   'set key outside right top font ",9"', "set grid",
                   'set xlabel "transfer size"; set ylabel "time ratio"',
                   "set logscale y; set format y '%g'",
                   f"set yrange [{lo / 1.2}:{hi * 1.2}]",
                   f"set logscale x 2; set xrange [{xs[0] / 2}:{xs[-1] * 2}]",
                   "set xtics rotate by -30 (" + ", ".join(f'"{size_name(b)}" {b}' for b in tics) + ")",
                   "plot " + ", ".join(parts), "reset"]
    script.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)
    shutil.rmtree(datdir, ignore_errors=True)
    print(f"ratio plot: {out}/ratio_vs_best.png")


def plot(out, data, methods):
    if not shutil.which("gnuplot"):
        print("report: gnuplot not found; no plots", file=sys.stderr)
        return
    ops = [op for op in OP_ORDER if any(k[0] == op for k in data)]
    datdir = os.path.join(out, ".plotdata")
    os.makedirs(datdir, exist_ok=True)
    files = {}
    for op in ops:
        for m in methods:
            pts = [(b, ms[m]["gbps"]) for (o, b), ms in data.items()
                   if o == op and m in ms and ms[m]["ok"] and ms[m]["gbps"] > 0]
            if not pts:
                continue
            fn = os.path.join(datdir, f"{op}.{m}.dat")
            with open(fn, "w") as f:
                for b, g in sorted(pts):
                    f.write(f"{b} {g}\n")
            files.setdefault(op, []).append((m, fn, len(pts)))

    styles = {m: i + 1 for i, m in enumerate(METHOD_ORDER)}

    def panel(op):
        xs = sorted({b for (o, b) in data if o == op})
        s = [f'set title "{OP_TITLE.get(op, op)}" noenhanced']
        s.append('set logscale y; set ylabel "GB/s"; set grid; set format y "%g"')
        parts = []
        if len(xs) > 1:
            s.append('set logscale x 2; set xlabel "transfer size"')
            s.append(f"set xrange [{xs[0] / 2}:{xs[-1] * 2}]")
            s.append("set xtics rotate by -30 (" + ", ".join(f'"{size_name(b)}" {b}' for b in xs) + ")")
            for m, fn, n in files[op]:
                parts.append(f"'{fn}' using 1:2 with linespoints lw 2 pt 7 ps 1.2 "
                             f"lc {styles.get(m, 9)} title '{m}'")
        else:  # one size: one labelled column per method
            ms = files[op]
            s.append(f'unset logscale x; set xlabel "{size_name(xs[0])}"; set xrange [-0.7:{len(ms) - 0.3}]')
            s.append("set xtics rotate by -30 (" + ", ".join(f'"{m}" {j}' for j, (m, _, _) in enumerate(ms)) + ")")
            s.append("unset key")
            for j, (m, fn, n) in enumerate(ms):
                parts.append(f"'{fn}' using ({j}):2 with impulses lw 12 lc {styles.get(m, 9)} notitle")
        s.append("plot " + ", ".join(parts))
        return "\n".join(s) + "\n"

    common = 'set key left top noenhanced font ",9"\n'
    for op in ops:
        png = os.path.join(out, f"bandwidth_{op}.png")
        script = f"set terminal pngcairo noenhanced size 900,600\nset output '{png}'\n" + common + panel(op)
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    rows = (len(ops) + 1) // 2
    png = os.path.join(out, "bandwidth.png")
    script = (f"set terminal pngcairo noenhanced size 1500,{520 * rows}\nset output '{png}'\n" + common
              + f"set multiplot layout {rows},2\n"
              + "".join(panel(op) + "reset\n" + common for op in ops) + "unset multiplot\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    shutil.rmtree(datdir, ignore_errors=True)
    print(f"plots: {out}/bandwidth.png and {out}/bandwidth_<operation>.png")


def rss_table(path, out):
    rows = list(csv.DictReader(open(path)))
    if not rows:
        return
    base = {r["runtime"]: int(r["max_rss_kib"]) for r in rows if r["method"] == "none"}
    print()
    print("peak RSS of one round trip (fresh upload + download into a new vector), /usr/bin/time -v")
    print(f"{'method':<18} {'data MiB':>9} {'max RSS MiB':>12} {'over baseline MiB':>18}")
    md = ["| method | data MiB | max RSS MiB | over baseline MiB |", "|---|---:|---:|---:|"]
    for r in rows:
        rss = int(r["max_rss_kib"]) / 1024
        data = int(r["bytes"]) / (1 << 20)
        b = base.get(r["runtime"])
        over = f"{rss - b / 1024:.0f}" if b is not None and r["method"] != "none" else "-"
        name = r["method"] if r["method"] != "none" else f"none ({r['runtime']})"
        print(f"{name:<18} {data:>9.0f} {rss:>12.0f} {over:>18}")
        md.append(f"| {name} | {data:.0f} | {rss:.0f} | {over} |")
    print("(baseline 'none' = same process holding the source and result vectors and an OpenCL "
          "context, moving nothing; pyopencl rows use the Python baseline)")
    with open(os.path.join(out, "rss.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rss", default="")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("csvs", nargs="+")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = load(a.csvs)
    if not rows:
        sys.exit("report: no rows")
    device = rows[0].get("device", "")
    bad = [r for r in rows if not r["ok"]]
    data = index(rows)
    present = {r["method"] for r in rows}
    methods = [m for m in METHOD_ORDER if m in present]
    peers = [p for p in PEERS if p in present]
    merged = os.path.join(a.out, "benchmark.csv")
    with open(merged, "w", newline="") as f:
        cols = ["op", "bytes", "method", "reps", "median_us", "q1_us", "q3_us", "gbps", "ok",
                "device", "clbuf_ratio"]
        w = csv.writer(f)
        w.writerow(cols)
        for (op, b), ms in data.items():
            for m in methods:
                if m in ms:
                    r = ms[m]
                    q = ratio(ms.get("clbuf"), r)
                    w.writerow([op, b, m, r["reps"], r["median_us"], r["q1_us"], r["q3_us"],
                                r["gbps"], int(r["ok"]), r.get("device", ""),
                                f"{q:.4f}" if q is not None else ""])
    print(f"device: {device}")
    print_tables(data, methods, peers)
    write_markdown(os.path.join(a.out, "table.md"), data, methods, peers, device)
    verdict = write_every_size(os.path.join(a.out, "every_size.md"), data, device)
    if a.rss and os.path.exists(a.rss):
        rss_table(a.rss, a.out)
    if not a.no_plot:
        plot(a.out, data, methods)
        plot_ratios(a.out, data)
    print(f"merged CSV: {merged}; markdown table: {a.out}/table.md")
    if verdict:
        print(f"every size: {a.out}/every_size.md; {verdict}")
    if bad:
        print(f"report: {len(bad)} failed results", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
