#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Draws a clbuf trace (CLBUF_TRACE, Options::trace_path, clbuf.trace()) as a picture: a row per
track (pid, tid), spans as bars (overlapping ones stacked in the row), counters as lines, MPI
messages' flow arrows from each send to its receive.

    python3 bench/trace_plot.py trace.json -o timeline.png
    python3 bench/trace_plot.py merged.json -o halo.png \\
        --from HaloExchange::start --to HaloExchange::finish --index 3

--from/--to/--index: the window from the start of the INDEX-th span named FROM (the earliest over
the processes) to the end of the INDEX-th span named TO (the latest); --begin/--end: a window in
microseconds from the first event. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import collections
import json
import sys
import zlib

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch
except ImportError:
    sys.exit("trace_plot: needs matplotlib (Debian: apt-get install python3-matplotlib)")

Span = collections.namedtuple("Span", "track name begin end args")


def load(path):
    """Processes {pid: name}, tracks {(pid, tid): name}, spans, counters, flows of a file."""
    with open(path, encoding="utf-8") as handle:
        root = json.load(handle)
    events = root["traceEvents"] if isinstance(root, dict) else root
    processes, tracks, spans, flows = {}, {}, [], collections.defaultdict(dict)
    counters = collections.defaultdict(list)  # (pid, name) -> [(ts, {series: value})]
    opened = {}
    for e in events:
        ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
        if ph == "M":
            name = e.get("args", {}).get("name", "")
            if e.get("name") == "process_name":
                processes[pid] = name
            elif e.get("name") == "thread_name":
                tracks[(pid, tid)] = name
        elif ph == "X":
            spans.append(Span((pid, tid), e["name"], e["ts"], e["ts"] + e.get("dur", 0),
                              e.get("args", {})))
        elif ph == "b":
            opened[(pid, e.get("id"), e["name"])] = e
        elif ph == "e":
            start = opened.pop((pid, e.get("id"), e["name"]), None)
            if start is not None:
                spans.append(Span((pid, tid), e["name"], start["ts"], e["ts"],
                                  start.get("args", {})))
        elif ph == "C":
            counters[(pid, e["name"])].append((e["ts"], e.get("args", {})))
        elif ph in ("s", "f"):
            flows[e.get("id")][ph] = ((pid, tid), e["ts"])
    return processes, tracks, spans, counters, flows


def window(spans, args, origin):
    """The window shown, in microseconds of the trace's clock."""
    if args.begin is not None or args.end is not None:
        return (origin + (args.begin or 0),
                origin + args.end if args.end is not None else float("inf"))
    if not args.span_from:
        return -float("inf"), float("inf")

    def nth(name, pick, edge):
        by_process = collections.defaultdict(list)
        for s in spans:
            if s.name == name:
                by_process[s.track[0]].append(s)
        found = [sorted(v, key=lambda s: s.begin)[args.index] for v in by_process.values()
                 if len(v) > args.index]
        if not found:
            sys.exit(f"trace_plot: no span {name!r} number {args.index}")
        return pick(edge(s) for s in found)

    begin = nth(args.span_from, min, lambda s: s.begin)
    end = nth(args.span_to or args.span_from, max, lambda s: s.end)
    pad = (end - begin) * 0.03
    return begin - pad, end + pad


COLOURS = {}


def colour(name, cmap=plt.get_cmap("tab20")):
    """A colour per span name: distinct for the first 20 names met, then by hash."""
    if name not in COLOURS:
        n = len(COLOURS)
        COLOURS[name] = cmap((n * 2) % 20 + (n // 10) % 2 if n < 20 else zlib.crc32(name.encode()) % 20)
    return COLOURS[name]


def short(process):
    """"rank 0: <device>" -> "rank 0"; a long name cut."""
    if process.startswith("rank ") and ":" in process:
        return process.split(":", 1)[0]
    return process if len(process) <= 28 else process[:27] + "…"


def levels(spans):
    """Each span's level in its row: the lowest free one, so that a span nested in another (a
    phase in its call) or overlapping it (DMAs in flight) is drawn above it."""
    ends, level = [], {}
    for s in sorted(spans, key=lambda s: (s.begin, -s.end)):
        for i, end in enumerate(ends):
            if end <= s.begin:
                ends[i] = s.end
                break
        else:
            i = len(ends)
            ends.append(s.end)
        level[id(s)] = i
    return level, max(len(ends), 1)


def rows_of(processes, tracks, spans, counters, lo, hi):
    """The rows shown, in order: (label, kind, key) for tracks with spans in the window and
    counters with samples in it."""
    seen = {s.track for s in spans if s.end >= lo and s.begin <= hi}
    order = sorted(seen, key=lambda t: (t[0], list(tracks).index(t) if t in tracks else 1 << 30))
    rows = []
    pids = sorted({t[0] for t in order} | {k[0] for k in counters})
    for pid in pids:
        who = short(processes.get(pid, f"pid {pid}")) if len(pids) > 1 else ""
        for track in (t for t in order if t[0] == pid):
            rows.append((f"{who}{': ' if who else ''}{tracks.get(track, f'tid {track[1]}')}",
                         "spans", track))
        for key in sorted(k for k in counters if k[0] == pid):
            if any(lo <= ts <= hi for ts, _ in counters[key]):
                rows.append((f"{who}{': ' if who else ''}{key[1]}", "counter", key))
    return rows


def draw_counter(ax, y, h, samples, lo, hi, origin, scale):
    """A counter's series as step lines in its row (y to y + h), scaled to their peak."""
    series = sorted({name for _, values in samples for name in values})
    peak = max((v for _, values in samples for v in values.values()), default=0) or 1
    for j, name in enumerate(series):
        xs, ys, last = [], [], 0.0
        for ts, values in sorted(samples, key=lambda x: x[0]):
            last = values.get(name, last)
            xs.append((min(max(ts, lo), hi) - origin) / scale)
            ys.append(y + h * (0.1 + 0.7 * last / peak))
        if xs:
            xs.append((hi - origin) / scale if hi != float("inf") else xs[-1])
            ys.append(ys[-1])
            ax.step(xs, ys, where="post", lw=1.2, color=f"C{j}", label=None)
            ax.text(xs[0] + j * (xs[-1] - xs[0]) / 3, y + h * 0.97, f"{name} (max {peak:,.0f})",
                    fontsize=6, color=f"C{j}", va="top", ha="left")


def plot(path, args):
    processes, tracks, spans, counters, flows = load(path)
    if not spans:
        sys.exit(f"trace_plot: {path} holds no spans")
    origin = min(s.begin for s in spans)
    lo, hi = window(spans, args, origin)
    lo, hi = max(lo, origin), min(hi, max(s.end for s in spans))
    origin = lo  # the axis counts from the window's start
    scale = 1000.0 if hi - lo > 5000 else 1.0  # milliseconds past 5 ms
    rows = rows_of(processes, tracks, spans, counters, lo, hi)
    in_row = {key: [s for s in spans if s.track == key and s.end >= lo and s.begin <= hi]
              for _, kind, key in rows if kind == "spans"}
    stacked = {key: levels(mine) for key, mine in in_row.items()}
    # A row is as tall as its levels (at most 4 rows' worth); a counter's row 1.5.
    tall = [1.5 if kind == "counter" else min(0.6 + 0.4 * stacked[key][1], 4.0)
            for _, kind, key in rows]
    fig, ax = plt.subplots(figsize=(args.width, 0.9 + 0.32 * sum(tall)), dpi=args.dpi)
    row_of, names, y = {}, collections.Counter(), sum(tall)
    ticks = []
    for (_, kind, key), h in zip(rows, tall):
        y -= h
        row_of[key] = (y, h)
        ticks.append(y + h / 2)
        if kind == "counter":
            draw_counter(ax, y, h, counters[key], lo, hi, origin, scale)
            continue
        level, count = stacked[key]
        height = 0.8 * h / count
        for s in in_row[key]:
            x0, x1 = (max(s.begin, lo) - origin) / scale, (min(s.end, hi) - origin) / scale
            ax.barh(y + 0.1 * h + level[id(s)] * height, max(x1 - x0, (hi - lo) / scale / 2000),
                    left=x0, height=height * 0.92, align="edge", color=colour(s.name),
                    edgecolor="none")
            names[s.name] += 1
    for ends in flows.values():
        if "s" in ends and "f" in ends and ends["s"][0] in row_of and ends["f"][0] in row_of:
            (a, ta), (b, tb) = ends["s"], ends["f"]
            if lo <= ta <= hi or lo <= tb <= hi:
                ax.add_patch(FancyArrowPatch(((ta - origin) / scale, sum(row_of[a]) - 0.5),
                                             ((tb - origin) / scale, sum(row_of[b]) - 0.5),
                                             arrowstyle="-|>", mutation_scale=8, lw=0.8,
                                             color="black", alpha=0.7))
    ax.set_yticks(ticks)
    ax.set_yticklabels([label for label, _, _ in rows], fontsize=6.5)
    ax.set_ylim(0, sum(tall))
    ax.set_xlim((lo - origin) / scale, (hi - origin) / scale)
    ax.set_xlabel("ms" if scale > 1 else "µs", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", lw=0.3, alpha=0.5)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour(n)) for n, _ in names.most_common(14)]
    ax.legend(handles, [n for n, _ in names.most_common(14)], fontsize=6, ncol=7,
              loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    shown = sorted({key[0] for _, _, key in rows})
    title = args.title or ""
    if len(shown) == 1:  # one process: its name goes in the title, not on every row
        title += ("\n" if title else "") + processes.get(shown[0], f"pid {shown[0]}")
    if title:
        ax.set_title(title, fontsize=9, pad=30)
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a trace file (or one merged by scripts/trace_merge.py)")
    parser.add_argument("-o", "--output", default="timeline.png", help="PNG (default timeline.png)")
    parser.add_argument("--from", dest="span_from", help="window: from the span named FROM")
    parser.add_argument("--to", dest="span_to", help="window: to the end of the span named TO")
    parser.add_argument("--index", type=int, default=0, help="which FROM/TO span (from 0)")
    parser.add_argument("--begin", type=float, help="window begin, µs after the first event")
    parser.add_argument("--end", type=float, help="window end, µs after the first event")
    parser.add_argument("--title", help="a title above the picture")
    parser.add_argument("--width", type=float, default=11.0, help="inches (default 11)")
    parser.add_argument("--dpi", type=int, default=100, help="default 100")
    args = parser.parse_args()
    plot(args.trace, args)


if __name__ == "__main__":
    main()
