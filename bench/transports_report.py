#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The table of bench/transports.sh: TCP against shared memory, per tool, memory model, method,
operation and size.

    bench/transports_report.py OUT_DIR

Reads OUT_DIR/{sm,tcp}/round-N/<tool>-<memory>.csv, each row already one run's median, read as
bench/ab_report.py reads them (mpi_bench: us per ping-pong one way, and for stream and allreduce
rows the time from GB/s, bytes / GB/s; halo rows: us per exchange). For every (tool, memory,
operation, size) it prints each transport's median over rounds, tcp / sm of those medians (above
1: TCP slower), and the lowest and highest tcp / sm of one round (the two runs of a round are
next to each other in time, so the spread is the noise of the pair).
"""
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ab_report import fmt_us, read_csv, size_name  # noqa: E402

TOOLS = ["mpi_bench", "mpi_halo"]
MEMORIES = ["default", "discrete"]
SIDES = ("sm", "tcp")


def collect(out):
    """{(tool, memory, op, bytes): {side: {round: us}}} and the order operations came in."""
    data, order = {}, {}
    for side in SIDES:
        for path in sorted((out / side).glob("round-*/*.csv")):
            tool, _, memory = path.stem.rpartition("-")
            round_no = int(path.parent.name.split("-")[1])
            for op, nbytes, us in read_csv(path, tool):
                if us is None:
                    continue
                order.setdefault((tool, memory, op), len(order))
                data.setdefault((tool, memory, op, nbytes), {}).setdefault(side, {})[round_no] = us
    return data, order


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    data, order = collect(out)
    if not data:
        print(f"transports_report: no CSV under {out}/{{sm,tcp}}/round-*/", file=sys.stderr)
        return 2

    def rank(key):
        tool, memory, op, nbytes = key
        return (TOOLS.index(tool) if tool in TOOLS else len(TOOLS), tool,
                MEMORIES.index(memory) if memory in MEMORIES else len(MEMORIES), memory,
                order[(tool, memory, op)], nbytes)

    section = None
    for key in sorted(data, key=rank):
        tool, memory, op, nbytes = key
        if (tool, memory) != section:
            section = (tool, memory)
            print(f"\n### {tool}, memory {memory} (us, median over rounds of each run's median)\n")
            print("| operation | size | sm | tcp | tcp/sm | per round | rounds |")
            print("|---|---:|---:|---:|---:|---:|---:|")
        sm, tcp = data[key].get("sm", {}), data[key].get("tcp", {})
        med_sm = statistics.median(sm.values()) if sm else None
        med_tcp = statistics.median(tcp.values()) if tcp else None
        ratio = f"{med_tcp / med_sm:.2f}" if med_sm and med_tcp else "–"
        pairs = [tcp[r] / sm[r] for r in sm if r in tcp and sm[r] > 0]
        spread = f"{min(pairs):.2f}-{max(pairs):.2f}" if pairs else "–"
        print(f"| {op} | {size_name(nbytes)} | {fmt_us(med_sm) if med_sm else '–'} | "
              f"{fmt_us(med_tcp) if med_tcp else '–'} | {ratio} | {spread} | "
              f"{len(sm)}/{len(tcp)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
