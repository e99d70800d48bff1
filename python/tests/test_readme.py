# SPDX-License-Identifier: MIT
"""The Python code of python/README.md runs as written (issue 35): a first round trip, and
pyopencl both ways where pyopencl imports. The MPI example needs mpiexec: test_mpi_api.py runs
the same exchange."""
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _block(marker):
    found = [block for block in BLOCKS if marker in block]
    assert len(found) == 1, (marker, len(found))
    return found[0]


def test_the_first_round_trip_runs(bm):
    exec(compile(_block("bm.fill(out[500:], 0.5)"), str(README), "exec"), {})


def test_pyopencl_both_ways_runs(bm):
    pytest.importorskip("pyopencl")
    exec(compile(_block("BufferManager.from_pyopencl(queue)"), str(README), "exec"), {})


def test_the_device_group_example_runs(bm):
    exec(compile(_block("clbuf.ShardedHalo(group, sharded)"), str(README), "exec"), {})


def test_the_files_example_runs(bm, tmp_path, monkeypatch):
    import numpy as np
    import clbuf
    monkeypatch.chdir(tmp_path)  # the block writes u.npy and out.npy where it runs
    scope = {"np": np, "clbuf": clbuf, "bm": bm}
    exec(compile(_block('clbuf.load("u.npy", bm)'), str(README), "exec"), scope)
    assert scope["u"].shape == (3, 4)
    assert np.array_equal(np.load("out.npy"), np.arange(12, dtype=np.float32).reshape(3, 4))


def test_the_checkpoint_example_runs(bm, tmp_path, monkeypatch):
    import numpy as np
    import clbuf
    monkeypatch.chdir(tmp_path)  # the block saves the folder ckpt where it runs
    scope = {"np": np, "clbuf": clbuf, "bm": bm}
    exec(compile(_block('clbuf.Checkpoint(bm, "ckpt")'), str(README), "exec"), scope)
    assert np.array_equal(np.load("ckpt/field.npy"), np.zeros((64, 64)))


def test_the_tile_stream_example_runs():
    pytest.importorskip("pyopencl")
    import numpy as np
    import clbuf
    scope = {"np": np, "clbuf": clbuf}
    exec(compile(_block("clbuf.stream_tiles(bm, data, fn"), str(README), "exec"), scope)
    expected = np.arange(1_000_000, dtype=np.float32)
    assert np.array_equal(scope["y"], 2 * expected + 1)
    assert np.array_equal(scope["data"], 2 * expected + 1)
    scope["bm"].cleanup()


def test_every_python_block_is_run_or_named_here():
    assert len(BLOCKS) == 7 and sum("mpi4py" in block for block in BLOCKS) == 1
