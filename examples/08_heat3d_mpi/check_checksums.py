#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""CTest driver for examples/08_heat3d_mpi.

Runs the solver on 1 to 4 ranks and checks that
  - every run's last line is the same `field checksum: <16 hex digits>`,
  - it is not the initial field's (--iters 0), so a solver that does nothing fails,
  - it is the checksum of this script's own Jacobi iteration in Python (independent of the C++
    host reference behind --verify; Python floats are IEEE doubles and the sum is taken in the
    kernel's order, so the bytes agree exactly),
  - bad arguments and too many ranks end every rank with a message and a non-zero status, in
    time (no hang).

usage: check_checksums.py MPIEXEC NUMPROC_FLAG "FLAG;FLAG;..." EXECUTABLE
"""
import struct
import subprocess
import sys

# 19 planes split unevenly on 2, 3 and 4 ranks; 5 planes on 4 ranks leaves three ranks one plane
# each (both neighbours' ghosts next to the only plane; rank 0's one plane is the fixed face).
CASES = ((19, 10, (1, 2, 3, 4)), (5, 3, (1, 4)))


def fnv1a(data):
    value = 0xcbf29ce484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return value


def initial(n, x, y, z):
    if z == 0:
        return 1.0
    if x in (0, n - 1) or y in (0, n - 1) or z == n - 1:
        return 0.0
    return ((7 * x + 13 * y + 29 * z) % 64) / 64.0


def reference(n, iters):
    """The whole cube, x fastest, after `iters` Jacobi iterations; its FNV-1a checksum."""
    plane = n * n
    field = [initial(n, x, y, z) for z in range(n) for y in range(n) for x in range(n)]
    for _ in range(iters):
        new = list(field)
        for z in range(1, n - 1):
            for y in range(1, n - 1):
                for x in range(1, n - 1):
                    i = z * plane + y * n + x
                    new[i] = (field[i - 1] + field[i + 1] + field[i - n] + field[i + n] +
                              field[i - plane] + field[i + plane]) / 6.0
        field = new
    return "%016x" % fnv1a(struct.pack("=%dd" % len(field), *field))


def run(command, ranks, args):
    mpiexec, numproc_flag, flags, executable = command
    line = [mpiexec, numproc_flag, str(ranks)] + flags + [executable] + args
    try:
        done = subprocess.run(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=60)
    except subprocess.TimeoutExpired:
        sys.exit("FAIL: %s hung (60 s)" % " ".join(line))
    return done.returncode, done.stdout


def checksum(command, ranks, n, iters):
    status, output = run(command, ranks, ["--n", str(n), "--iters", str(iters)])
    lines = output.strip().splitlines()
    if status != 0 or not lines or not lines[-1].startswith("field checksum: "):
        sys.exit("FAIL: np %d --iters %d: status %d, output:\n%s" % (ranks, iters, status, output))
    value = lines[-1][len("field checksum: "):]
    if len(value) != 16 or any(c not in "0123456789abcdef" for c in value):
        sys.exit("FAIL: np %d: not 16 hex digits: %r" % (ranks, lines[-1]))
    print("np %d, --n %d --iters %d: %s" % (ranks, n, iters, value))
    return value


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    mpiexec, numproc_flag, flags, executable = sys.argv[1:]
    command = (mpiexec, numproc_flag, [f for f in flags.split(";") if f], executable)

    for n, iters, rank_counts in CASES:
        start = checksum(command, 1, n, 0)
        if start != reference(n, 0):
            sys.exit("FAIL: the initial field's checksum %s is not this script's" % start)
        expected = reference(n, iters)
        if expected == start:
            sys.exit("FAIL: the reference did not change the field")
        for ranks in rank_counts:
            got = checksum(command, ranks, n, iters)
            if got != expected:
                sys.exit("FAIL: np %d gives %s, the Python reference %s" % (ranks, got, expected))

    refusals = [
        (2, ["--n", "2"], "--n must be a whole number from 3 to 1024"),
        (2, ["--n", "sixty"], "--n must be a whole number from 3 to 1024"),
        (2, ["--iters"], "--iters needs a value"),
        (2, ["--size", "8"], "unknown argument '--size'"),
        (4, ["--n", "3"], "4 ranks for --n 3: every rank needs at least one z-plane"),
    ]
    for ranks, args, message in refusals:
        status, output = run(command, ranks, args)
        if status == 0 or message not in output:
            sys.exit("FAIL: np %d %s: status %d (want non-zero), output (want %r):\n%s" %
                     (ranks, " ".join(args), status, message, output))
        print("np %d %s: refused, status %d" % (ranks, " ".join(args), status))
    print("all checksums agree with the Python reference and differ from the initial field's")


if __name__ == "__main__":
    main()
