#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""CTest driver for example 08's checkpoints (issue 44): on 1, 2 and 4 ranks,
  - `--iters 2K` straight and `--iters K --checkpoint D --checkpoint-every K`, then
    `--restart D --iters 2K`, print the same `field checksum:`;
  - a run restarted from D that checkpoints every K iterations into D is killed (SIGKILL to
    mpiexec, then to every rank left) at a random instant, usually inside a checkpoint; `--restart D`
    then resumes from the last complete checkpoint and `--iters M` prints the checksum of
    `--iters M` straight;
  - a checkpoint of one rank count restarted on another is refused (non-zero status).

usage: check_restart.py MPIEXEC NUMPROC_FLAG "FLAG;FLAG;..." EXECUTABLE
"""
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

N = 17
K = 5
LONG = 150  # iterations of the run that is killed (a checkpoint every K: one is often in flight)
HANG_S = 900  # a run this long is stuck, not slow (a busy machine is slow)


def saved_once(folder, run):
    """Waits until the run has replaced the checkpoint `folder` by a new one (its start-up takes
    a while on a busy machine; a kill before that would test nothing), at most HANG_S."""
    first = os.stat(folder).st_ino
    start = time.time()
    while time.time() - start < HANG_S and run.poll() is None:
        try:
            if os.stat(folder).st_ino != first:
                return
        except OSError:  # between the save's two renames
            pass
        time.sleep(0.01)


def kill_ranks(folder):
    """SIGKILL to every process whose command line names `folder`, until none is left: Open MPI
    starts the ranks in process groups of their own, so a rank outlives its killed mpiexec for
    up to a second, saving checkpoints (the resumed run would read while it saves)."""
    needle = folder.encode()
    for _ in range(100):
        found = []
        for pid in os.listdir('/proc'):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open('/proc/%s/cmdline' % pid, 'rb') as f:
                    if needle in f.read().split(b'\0'):
                        found.append(int(pid))
            except OSError:
                pass
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    sys.exit('FAILED: the killed run\'s ranks did not end')


def main():
    mpiexec, numproc, flags, executable = sys.argv[1:5]
    flags = [f for f in flags.split(';') if f]
    folder = tempfile.mkdtemp(prefix='clbuf-08-restart-')

    def command(ranks, *args):
        return [mpiexec, numproc, str(ranks)] + flags + [executable, '--n', str(N)] + list(args)

    def checksum(ranks, *args):
        out = subprocess.run(command(ranks, *args), capture_output=True, text=True, timeout=HANG_S)
        if out.returncode != 0:
            sys.exit('FAILED: %s\n%s%s' % (' '.join(args), out.stdout, out.stderr))
        found = re.findall(r'^field checksum: ([0-9a-f]{16})$', out.stdout, re.M)
        if not found:
            sys.exit('FAILED: no checksum from %s\n%s' % (' '.join(args), out.stdout))
        checksum.restarted = re.findall(r'^restarted from iteration (\d+)$', out.stdout, re.M)
        return found[-1]

    try:
        straight = checksum(1, '--iters', str(2 * K))
        straight_long = checksum(1, '--iters', str(LONG))
        for ranks in (1, 2, 4):
            d = os.path.join(folder, 'np%d' % ranks)
            checksum(ranks, '--iters', str(K), '--checkpoint', d, '--checkpoint-every', str(K))
            restarted = checksum(ranks, '--iters', str(2 * K), '--restart', d)
            print('%d ranks: straight %s, restarted %s' % (ranks, straight, restarted))
            if restarted != straight:
                sys.exit('FAILED: %d ranks: the restart differs' % ranks)
            # Killed while checkpointing every K iterations from the restart on.
            run = subprocess.Popen(command(ranks, '--iters', str(LONG), '--restart', d,
                                           '--checkpoint', d, '--checkpoint-every', str(K)),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
            saved_once(d, run)
            time.sleep(random.uniform(0.0, 0.3))
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
            kill_ranks(d)
            resumed = checksum(ranks, '--iters', str(LONG), '--restart', d)
            print('%d ranks: killed at random, resumed from iteration %s: %s (straight %s)' %
                  (ranks, checksum.restarted[0], resumed, straight_long))
            if resumed != straight_long:
                sys.exit('FAILED: %d ranks: the run resumed after a kill differs' % ranks)
        other = subprocess.run(command(2, '--iters', str(2 * K), '--restart',
                                       os.path.join(folder, 'np1')),
                               capture_output=True, text=True, timeout=HANG_S)
        if other.returncode == 0 or 'rank' not in other.stderr:
            sys.exit('FAILED: a checkpoint of 1 rank was restarted on 2\n' + other.stderr)
        print('a checkpoint of 1 rank restarted on 2 is refused')
        print('every restart gives the straight run\'s checksum')
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == '__main__':
    main()
