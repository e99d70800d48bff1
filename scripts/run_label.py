#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs the CTest tests of a label, a few processes per test executable, optionally under a tool.

    scripts/run_label.py BUILD_DIR LABEL [--jobs N] [--timeout S] [--batch N] [--fail-on REGEX]
                         -- [TOOL [ARG...]]

scripts/sanitize.sh runs every sanitizer and tool stage with it. LABEL is a regular expression
matched whole against CTest labels (tests/CMakeLists.txt), e.g. `valgrind` or `(unit|fault)`; CTest
lists the cases with their commands (ctest --show-only=json-v1); the cases of one executable run
in processes of at most --batch cases each, `TOOL ARG... EXECUTABLE --gtest_filter=CASE:CASE...`,
with their ENVIRONMENT and WORKING_DIRECTORY; without a tool the executable runs alone. A few
processes per executable rather than one per case: the OpenCL platform starts once a batch (about
10 s under valgrind, a second under ASan) instead of once a case. With --costs (the seconds each
case took in an earlier run, e.g. the plain build's) long executables are split further and the
costliest batches start first, so that the last to finish is a short one. In the
tool's arguments {name} becomes the executable's name (for a log file per process). Fails when any
process fails, when a process's output has a line matching --fail-on (a tool's report that does
not change the exit status), or when the label has no test.
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time


def labelled_tests(build_dir, label):
    listing = subprocess.run(
        ["ctest", "--test-dir", build_dir, "-L", f"^{label}$", "--show-only=json-v1"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(listing).get("tests", [])


VERDICTS = ("PASS_REGULAR_EXPRESSION", "FAIL_REGULAR_EXPRESSION", "WILL_FAIL")


def verdict(key, code, output):
    """CTest's verdict on a test run alone: PASS_REGULAR_EXPRESSION (any matches: passed, whatever
    the exit status), FAIL_REGULAR_EXPRESSION (any matches: failed), WILL_FAIL (inverted)."""
    properties = dict(key[4]) if len(key) > 4 else {}
    if code == "timeout":
        return code
    passing = properties.get("PASS_REGULAR_EXPRESSION")
    if passing:
        code = 0 if any(re.search(p, output) for p in passing) else "no PASS_REGULAR_EXPRESSION"
    failing = properties.get("FAIL_REGULAR_EXPRESSION")
    if failing and any(re.search(p, output) for p in failing):
        code = "FAIL_REGULAR_EXPRESSION"
    if properties.get("WILL_FAIL") in (True, "ON", "TRUE", "1", 1):
        code = "passed, but WILL_FAIL" if code == 0 else 0
    return code


def read_costs(path):
    """CTest's own record of each test's seconds (Testing/Temporary/CTestCostData.txt)."""
    costs = {}
    if path and os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if line.startswith("---"):
                    break
                name, _, rest = line.rstrip("\n").rpartition(" ")
                name = name.rpartition(" ")[0]
                try:
                    costs[name] = float(rest)
                except ValueError:
                    pass
    return costs


def batches(tests, size, costs, jobs):
    """Groups the gtest cases by executable, environment and working directory, splits each group
    into batches of at most `size` cases and, given `costs`, of about a quarter of one job's share
    of the seconds (a second a case where unknown), and puts the costliest batch first."""
    groups = {}
    for test in tests:
        properties = {p["name"]: p["value"] for p in test.get("properties", [])}
        if properties.get("DISABLED"):
            continue
        command = test["command"]
        filters = [arg for arg in command if arg.startswith("--gtest_filter=")]
        rest = tuple(arg for arg in command if not arg.startswith("--gtest_filter="))
        environment = tuple(properties.get("ENVIRONMENT", []))
        directory = properties.get("WORKING_DIRECTORY")
        # A test that is not a gtest case runs alone and keeps CTest's verdict properties.
        verdict = tuple((name, tuple(properties[name]) if isinstance(properties[name], list)
                         else properties[name]) for name in VERDICTS if name in properties)
        key = (rest, environment, directory) if filters else (tuple(command), environment,
                                                              directory, test["name"], verdict)
        group = groups.setdefault(key, [])
        cost = costs.get(test["name"], 1.0)
        group.extend((f[len("--gtest_filter="):], cost) for f in filters)
        if not filters:
            group.append((None, cost))
    total = sum(cost for group in groups.values() for _, cost in group)
    most = max(total / (4 * jobs), 1.0) if costs else float("inf")
    split = []
    for key, group in groups.items():
        batch, seconds = [], 0.0
        for case, cost in group:
            if batch and (len(batch) >= size or seconds + cost > most):
                split.append((seconds, key, batch))
                batch, seconds = [], 0.0
            batch.append(case)
            seconds += cost
        split.append((seconds, key, batch))
    split.sort(key=lambda batch: -batch[0])
    return [(key, [case for case in batch if case is not None]) for _, key, batch in split]


def run(key, cases, tool, timeout):
    command, environment, directory = list(key[0]), key[1], key[2]
    name = os.path.basename(command[0])
    argv = [arg.replace("{name}", name) for arg in tool] + command
    if cases:
        argv.append("--gtest_filter=" + ":".join(cases))
    env = dict(os.environ)
    for assignment in environment:
        variable, _, value = assignment.partition("=")
        env[variable] = value
    start = time.monotonic()
    try:
        result = subprocess.run(argv, cwd=directory, env=env, timeout=timeout,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        code, output = result.returncode, result.stdout
        code = verdict(key, code, output)
    except subprocess.TimeoutExpired as expired:
        code = "timeout"
        output = expired.stdout if isinstance(expired.stdout, str) else ""
        output += f"\n(killed after {timeout} s)\n"
    return name, len(cases), code, output, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("label")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process")
    parser.add_argument("--batch", type=int, default=1000000, help="most cases per process")
    parser.add_argument("--costs", metavar="FILE",
                        help="CTestCostData.txt of an earlier run (of any build) to balance by")
    parser.add_argument("--fail-on", metavar="REGEX",
                        type=lambda pattern: re.compile(pattern, re.MULTILINE),
                        help="fail a process whose output has a line matching REGEX")
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("no -- before the tool (-- [TOOL [ARG...]])")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    tool = argv[split + 1:]

    groups = batches(labelled_tests(args.build_dir, args.label), max(args.batch, 1),
                     read_costs(args.costs), max(args.jobs, 1))
    if not groups:
        print(f"run_label: no test has the label {args.label} in {args.build_dir}",
              file=sys.stderr)
        return 1
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, key, cases, tool, args.timeout)
                   for key, cases in groups]
        for future in concurrent.futures.as_completed(futures):
            name, count, code, output, seconds = future.result()
            what = f"{count} case{'' if count == 1 else 's'}" if count else "the whole test"
            if code == 0 and args.fail_on and args.fail_on.search(output):
                code = f"output matches {args.fail_on.pattern!r}"
            if code == 0:
                print(f"run_label {args.label}: {name}: {what} passed in {seconds:.0f} s",
                      flush=True)
            else:
                failed += 1
                print(f"run_label {args.label}: {name}: {what} FAILED ({code}) after "
                      f"{seconds:.0f} s:\n{output}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
