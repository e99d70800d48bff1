#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs the CTest tests of one label under a tool, one process per test executable.

    scripts/run_label.py BUILD_DIR LABEL [--jobs N] [--timeout S] [--fail-on REGEX] -- TOOL [ARG...]

scripts/sanitize.sh runs valgrind and oclgrind with it. The label (tests/CMakeLists.txt) chooses
the test cases; CTest lists them with their commands (ctest --show-only=json-v1); the cases of one
executable run in one process, `TOOL ARG... EXECUTABLE --gtest_filter=CASE:CASE...`, with their
ENVIRONMENT and WORKING_DIRECTORY. One process per executable rather than per case: the OpenCL
platform starts once (about 10 s under valgrind) instead of once per case. In the tool's
arguments {name} becomes the executable's name (for a log file per process). Fails when any
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


def batches(tests):
    """Groups the gtest cases by executable, environment and working directory."""
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
        key = (rest, environment, directory) if filters else (tuple(command), environment,
                                                              directory, test["name"])
        group = groups.setdefault(key, [])
        group.extend(f[len("--gtest_filter="):] for f in filters)
    return groups


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
    parser.add_argument("--fail-on", metavar="REGEX",
                        type=lambda pattern: re.compile(pattern, re.MULTILINE),
                        help="fail a process whose output has a line matching REGEX")
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("no tool given (-- TOOL [ARG...])")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    tool = argv[split + 1:]

    groups = batches(labelled_tests(args.build_dir, args.label))
    if not groups:
        print(f"run_label: no test has the label {args.label} in {args.build_dir}",
              file=sys.stderr)
        return 1
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, key, cases, tool, args.timeout)
                   for key, cases in groups.items()]
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
