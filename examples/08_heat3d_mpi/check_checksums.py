#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""CTest driver for examples/08_heat3d_mpi.

Runs the solver on 1 to 4 ranks in 3-D blocks (--decomp blocks, the default; also on 8 ranks,
the only count below 12 that splits x too) and in z-slabs (--decomp slab), each run with
--verify and --report 5, and checks that
  - every run says it `matches the host reference` (rank 0's C++ host reference of the whole
    cube, compared byte for byte) just before its checksum,
  - every run's last line is the same `field checksum: <16 hex digits>` for every rank count and
    both decompositions,
  - it is not the initial field's (--iters 0), so a solver that does nothing fails,
  - it is the checksum of this script's own Jacobi iteration in Python (independent of the C++
    host reference behind --verify; Python floats are IEEE doubles and the sum is taken in the
    kernel's order, so the bytes agree exactly),
  - bad arguments and too many ranks for N (slabs: more ranks than planes; blocks: more blocks
    along an axis than cells) end every rank with a message and a non-zero status, in time (no
    hang).

With --transports "TCP_FLAG;TCP_FLAG;..." instead (issue 36 item 5, ranks as on separate nodes):
runs the solver on 2 and 4 ranks in blocks once over Open MPI's shared memory (SHARED_MEMORY
below) and once with the flags given (TCP only), each with --mca btl_base_verbose 30, and checks
that the log of each run shows its ranks reaching each other through that transport and no other
(Open MPI's `mca: bml: Using <btl> btl for send to` lines; self is a rank's messages to itself),
and that both runs' checksums are the Python reference's.

usage: check_checksums.py MPIEXEC NUMPROC_FLAG "FLAG;FLAG;..." EXECUTABLE [--transports "FLAG;..."]
"""
import re
import struct
import subprocess
import sys

# (decomposition, N, iterations, rank counts). N = 19 splits unevenly everywhere: slabs of
# 10/9, 7/6/6, 5/5/5/4 planes; blocks (MPI_Dims_create, the most along z) of 1x1x2,
# 1x1x3, 1x2x2 and 2x2x2 with 10/9 and 7/6/6 cells along the split axes. The tiny cases give some
# ranks a part one cell thick: slabs, N = 5 on 4 ranks: three ranks one plane each (both
# neighbours' ghosts next to the only plane; rank 0's one plane is the fixed face); blocks, N = 4
# on 3 ranks: z-planes 2/1/1, the middle rank's one plane between two ghost layers; N = 3 on 4 and
# 8 ranks: 2/1 along each split axis, so only rank 0 updates a cell (the centre, every one of its
# stencil's split-axis neighbours a ghost) and the others hold nothing but the fixed boundary.
CASES = (
    ("blocks", 19, 10, (1, 2, 3, 4, 8)),
    ("slab", 19, 10, (1, 2, 3, 4)),
    ("slab", 5, 3, (1, 4)),
    ("blocks", 4, 3, (1, 3)),
    ("blocks", 3, 2, (1, 4, 8)),
)


# The transport-check runs: (decomposition, N, iterations, rank counts); the shared-memory flags
# (Open MPI 4's vader, which Open MPI 5 calls sm and still accepts as vader).
TRANSPORT_CASES = (("blocks", 19, 10, (2, 4)),)
SHARED_MEMORY = ["--mca", "pml", "ob1", "--mca", "btl", "vader,self"]
BML_LINE = re.compile(r"mca: bml: Using (\S+) btl for send to")


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


# A run that takes this long hangs: one takes 1-3 s on an idle 2-core machine, and a machine kept
# busy by other work may make it ten times slower (issue 45), never a hundred.
RUN_LIMIT = 300


def run(command, ranks, args):
    mpiexec, numproc_flag, flags, executable = command
    line = [mpiexec, numproc_flag, str(ranks)] + flags + [executable] + args
    try:
        done = subprocess.run(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=RUN_LIMIT)
    except subprocess.TimeoutExpired:
        sys.exit("FAIL: %s hung (%d s)" % (" ".join(line), RUN_LIMIT))
    return done.returncode, done.stdout


def checksum(command, decomp, ranks, n, iters):
    status, output = run(command, ranks, ["--decomp", decomp, "--n", str(n), "--iters", str(iters),
                                          "--report", "5", "--verify"])
    lines = output.strip().splitlines()
    if (status != 0 or len(lines) < 2 or not lines[-1].startswith("field checksum: ") or
            lines[-2] != "matches the host reference"):
        sys.exit("FAIL: %s np %d --n %d --iters %d: status %d, output:\n%s" %
                 (decomp, ranks, n, iters, status, output))
    value = lines[-1][len("field checksum: "):]
    if len(value) != 16 or any(c not in "0123456789abcdef" for c in value):
        sys.exit("FAIL: %s np %d: not 16 hex digits: %r" % (decomp, ranks, lines[-1]))
    print("%-6s np %d, --n %d --iters %d: %s" % (decomp, ranks, n, iters, value))
    return value


def transported_checksum(command, transport, extra, decomp, ranks, n, iters):
    """The checksum of one run whose ranks must reach each other through btl `transport` only."""
    mpiexec, numproc_flag, flags, executable = command
    status, output = run((mpiexec, numproc_flag, flags + extra + ["--mca", "btl_base_verbose", "30"],
                          executable), ranks,
                         ["--decomp", decomp, "--n", str(n), "--iters", str(iters)])
    used = sorted(set(BML_LINE.findall(output)) - {"self"})
    sums = [line[len("field checksum: "):] for line in output.splitlines()
            if line.startswith("field checksum: ")]
    if status != 0 or len(sums) != 1:
        sys.exit("FAIL: %s %s np %d --n %d --iters %d: status %d, output:\n%s" %
                 (transport, decomp, ranks, n, iters, status, output))
    if used != [transport]:
        sys.exit("FAIL: %s np %d: the ranks used btl %s, not %s only; output:\n%s" %
                 (decomp, ranks, used, transport, output))
    print("%-6s np %d, --n %d --iters %d over %s: %s" % (decomp, ranks, n, iters, transport,
                                                          sums[0]))
    return sums[0]


def transports(command, tcp_flags):
    for decomp, n, iters, rank_counts in TRANSPORT_CASES:
        expected = reference(n, iters)
        for ranks in rank_counts:
            shared = transported_checksum(command, "vader", SHARED_MEMORY, decomp, ranks, n, iters)
            tcp = transported_checksum(command, "tcp", tcp_flags, decomp, ranks, n, iters)
            if shared != expected or tcp != expected:
                sys.exit("FAIL: %s np %d --n %d: shared memory %s, TCP %s, the Python reference %s"
                         % (decomp, ranks, n, shared, tcp, expected))
    print("TCP and shared memory give the Python reference's checksums")


def main():
    if len(sys.argv) not in (5, 7) or (len(sys.argv) == 7 and sys.argv[5] != "--transports"):
        sys.exit(__doc__)
    mpiexec, numproc_flag, flags, executable = sys.argv[1:5]
    command = (mpiexec, numproc_flag, [f for f in flags.split(";") if f], executable)
    if len(sys.argv) == 7:
        transports(command, [f for f in sys.argv[6].split(";") if f])
        return

    started = set()
    for decomp, n, iters, rank_counts in CASES:
        if n not in started:
            started.add(n)
            start = checksum(command, decomp, 1, n, 0)
            if start != reference(n, 0):
                sys.exit("FAIL: the initial field's checksum %s is not this script's" % start)
        start = reference(n, 0)
        expected = reference(n, iters)
        if expected == start:
            sys.exit("FAIL: the reference did not change the field")
        for ranks in rank_counts:
            got = checksum(command, decomp, ranks, n, iters)
            if got != expected:
                sys.exit("FAIL: %s np %d --n %d gives %s, the Python reference %s" %
                         (decomp, ranks, n, got, expected))

    refusals = [
        (2, ["--n", "2"], "--n must be a whole number from 3 to 1024"),
        (2, ["--n", "sixty"], "--n must be a whole number from 3 to 1024"),
        (2, ["--iters"], "--iters needs a value"),
        (2, ["--size", "8"], "unknown argument '--size'"),
        (2, ["--decomp", "cubes"], "--decomp must be blocks or slab (got 'cubes')"),
        (4, ["--decomp", "slab", "--n", "3"],
         "4 ranks for --n 3: every rank needs at least one z-plane"),
        # 5 ranks are 1 x 1 x 5 blocks: 5 along z, more than N = 4 cells.
        (5, ["--n", "4"], "5 ranks for --n 4: too many ranks for N: --decomp blocks splits the "
         "cube into 1 x 1 x 5 blocks"),
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
