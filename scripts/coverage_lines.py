#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Line coverage of one source folder from a gcc --coverage build's counters.

    scripts/coverage_lines.py BUILD_DIR PREFIX OUTPUT_INFO [--jobs N] [--gcov gcov]

Runs `gcov --json-format --stdout` on every .gcda file under BUILD_DIR (N at once), keeps the
lines of the files whose path starts with PREFIX, adds up each line's counts over every
translation unit and template instance (as lcov's capture and merge do), writes them as an lcov
tracefile (OUTPUT_INFO: genhtml and `lcov --list` read it) and prints a line per file, then the
summary in lcov's words: "lines......: 97.8% (8642 of 8833 lines)".

Why not lcov: its capture parses gcov's output of every header a test includes (the standard
library's, GoogleTest's) in Perl, 5.2 s for one test's counters against gcov's 0.4 s; the CI
stage took 246 s for what this does in a fraction. The counts are the same (checked on one test:
3052 lines, 2209 hit, both ways).
"""
import argparse
import collections
import concurrent.futures
import json
import os
import subprocess
import sys


def gcov_json(gcov, gcda):
    """gcov's JSON for one .gcda file, or raises with gcov's own message."""
    result = subprocess.run(
        [gcov, "--json-format", "--stdout", "-o", os.path.dirname(gcda), gcda],
        capture_output=True, check=False, cwd=os.path.dirname(gcda))
    if result.returncode != 0:
        raise RuntimeError(f"{gcov} failed on {gcda}: {result.stderr.decode(errors='replace')}")
    # One JSON document a line (one per .gcda); here exactly one.
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def line_counts(documents, prefix, counts):
    """Adds the documents' line counts of the files under prefix to counts[file][line]."""
    for document in documents:
        base = document.get("current_working_directory", "")
        for entry in document["files"]:
            path = os.path.normpath(os.path.join(base, entry["file"]))
            if not path.startswith(prefix):
                continue
            lines = counts[path]
            for line in entry["lines"]:
                lines[line["line_number"]] += line["count"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("prefix", help="keep the files whose absolute path starts with this")
    parser.add_argument("output_info")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--gcov", default="gcov")
    args = parser.parse_args()

    gcdas = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(os.path.abspath(args.build_dir))
        for name in names if name.endswith(".gcda"))
    if not gcdas:
        print(f"coverage_lines: no .gcda file under {args.build_dir}", file=sys.stderr)
        return 1
    prefix = os.path.normpath(os.path.abspath(args.prefix))
    counts = collections.defaultdict(lambda: collections.defaultdict(int))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for documents in pool.map(lambda gcda: gcov_json(args.gcov, gcda), gcdas):
            line_counts(documents, prefix, counts)
    if not counts:
        print(f"coverage_lines: no counted line under {prefix} in {len(gcdas)} .gcda files",
              file=sys.stderr)
        return 1

    hit_all = total_all = 0
    with open(args.output_info, "w", encoding="utf-8") as info:
        info.write("TN:\n")
        for path in sorted(counts):
            lines = counts[path]
            if not lines:
                continue  # a file with no executable line (lcov leaves it out too)
            hit = sum(1 for count in lines.values() if count > 0)
            info.write(f"SF:{path}\n")
            for number in sorted(lines):
                info.write(f"DA:{number},{lines[number]}\n")
            info.write(f"LF:{len(lines)}\nLH:{hit}\nend_of_record\n")
            print(f"{os.path.relpath(path, prefix):<40} {100.0 * hit / len(lines):6.1f}% "
                  f"{hit:5d} of {len(lines):5d}")
            hit_all += hit
            total_all += len(lines)
    print(f"{len(gcdas)} .gcda files, {len(counts)} source files")
    print(f"  lines......: {100.0 * hit_all / total_all:.1f}% ({hit_all} of {total_all} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
