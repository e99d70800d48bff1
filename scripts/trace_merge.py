#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Merges the trace files of an MPI run's ranks into one, for https://ui.perfetto.dev.

Under an MPI launcher each rank writes CLBUF_TRACE (or Options::trace_path) with its rank before
the file name's extension: trace.json -> trace.rank0.json, trace.rank1.json, ... (pid = rank; a
rank's further managers rank + k * 100000). Their flow arrows (an MPI message from its send to
its receive) carry the same id on both ranks, so the merge is the union of the events:

    scripts/trace_merge.py -o merged.json trace.json        # every trace.rank<N>.json
    scripts/trace_merge.py -o merged.json a.json b.json     # these files

A FILE that does not exist stands for its rank files. Processes of two files with one pid (files
of two runs, or not of ranks) are renumbered in the later file. Standard library only.
"""
import argparse
import glob
import json
import os
import re
import sys


def rank_files(path):
    """The rank files of `path`, in rank order (trace.json -> trace.rank<N>.json)."""
    folder, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    if not stem:  # a name that begins with its only dot: no extension
        stem, ext = name, ""
    pattern = re.compile(re.escape(stem) + r"\.rank(\d+)" + re.escape(ext) + "$")
    found = []
    for candidate in glob.glob(os.path.join(glob.escape(folder) or ".", "*")):
        match = pattern.match(os.path.basename(candidate))
        if match:
            found.append((int(match.group(1)), candidate))
    return [candidate for _, candidate in sorted(found)]


def events_of(path):
    """The events of a trace file: {"traceEvents": [...]} or a bare array."""
    with open(path, encoding="utf-8") as handle:
        try:
            root = json.load(handle)
        except json.JSONDecodeError as error:
            sys.exit(f"trace_merge: {path} is not JSON: {error}")
    events = root.get("traceEvents") if isinstance(root, dict) else root
    if not isinstance(events, list):
        sys.exit(f"trace_merge: {path} holds no traceEvents array")
    return events


def merge(paths):
    """The events of every file; a file's pids already taken by an earlier file are moved."""
    merged, taken = [], set()
    next_free = 1 << 24
    for path in paths:
        events = events_of(path)
        pids = {e.get("pid") for e in events if isinstance(e, dict) and "pid" in e}
        moved = {}
        for pid in sorted(p for p in pids if p in taken):
            while next_free in taken or next_free in pids:
                next_free += 1
            moved[pid] = next_free
            next_free += 1
        for event in events:
            if isinstance(event, dict) and event.get("pid") in moved:
                event = dict(event, pid=moved[event["pid"]])
            merged.append(event)
        taken |= {moved.get(p, p) for p in pids}
    return merged


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="trace files, or the path each rank's name was made from")
    parser.add_argument("-o", "--output", default="-", help="merged file (default: stdout)")
    args = parser.parse_args()
    paths = []
    for path in args.files:
        found = [path] if os.path.exists(path) else rank_files(path)
        if not found:
            sys.exit(f"trace_merge: no {path} and no rank files of it (such as "
                     f"{os.path.splitext(path)[0]}.rank0{os.path.splitext(path)[1]})")
        paths.extend(found)
    merged = {
        "otherData": {"clock": "std::chrono::steady_clock", "unit": "us",
                      "merged": [os.path.basename(p) for p in paths]},
        "traceEvents": merge(paths),
    }
    if args.output == "-":
        json.dump(merged, sys.stdout)
        sys.stdout.write("\n")
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(merged, handle)
            handle.write("\n")
        print(f"trace_merge: {len(paths)} files, {len(merged['traceEvents'])} events -> "
              f"{args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
