# SPDX-License-Identifier: MIT
"""``with clbuf.trace(path):`` (issue 37): the managers made inside the block write a Chrome
trace (valid JSON once the block ends), those made before it do not, an inner block wins until it
ends, the block wins over CLBUF_TRACE, and a path that cannot be written is a clbuf.Error at the
manager's construction."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import clbuf


def _events(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)["traceEvents"]


def _spans(path, name):
    return [e for e in _events(path) if e.get("ph") == "X" and e.get("name") == name]


def _data(n=1000):
    return np.random.default_rng().random(n).astype(np.float32) + 1.0


def test_managers_made_inside_the_block_are_traced(bm, tmp_path):
    path = tmp_path / "t.json"
    data = _data()
    with clbuf.trace(path):
        bm.upload_to_device(data)  # made before the block: not traced
        with clbuf.BufferManager() as inside:
            back = inside.download_from_device(inside.upload_to_device(data))
            np.testing.assert_array_equal(back, data)
    uploads = _spans(path, "upload")
    assert len(uploads) == 1, uploads
    assert uploads[0]["args"]["bytes"] == data.nbytes
    assert len(_spans(path, "download")) == 1
    processes = [e for e in _events(path) if e.get("name") == "process_name"]
    assert len(processes) == 1 and processes[0]["args"]["name"].startswith("clbuf: ")


def test_a_manager_made_inside_keeps_tracing_after_the_block(tmp_path):
    path = tmp_path / "t.json"
    with clbuf.trace(str(path)):
        manager = clbuf.BufferManager()
    buffer = manager.upload_to_device(_data())
    assert len(_spans(path, "upload")) == 0  # still in the thread's buffer: the file is whole
    manager.cleanup()
    assert len(_spans(path, "upload")) == 1
    with clbuf.BufferManager() as after:  # made after the block: not traced
        after.upload_to_device(_data())
    assert len(_spans(path, "upload")) == 1
    del buffer


def test_an_inner_block_wins_until_it_ends_and_the_block_wins_over_clbuf_trace(
        tmp_path, monkeypatch):
    env, outer, inner = (tmp_path / name for name in ("env.json", "outer.json", "inner.json"))
    monkeypatch.setenv("CLBUF_TRACE", str(env))
    with clbuf.trace(outer):
        with clbuf.trace(inner):
            with clbuf.BufferManager() as bm:
                bm.upload_to_device(_data())
        with clbuf.BufferManager() as bm:
            bm.upload_to_device(_data())
            bm.upload_to_device(_data())
    assert not env.exists()
    assert len(_spans(inner, "upload")) == 1
    assert len(_spans(outer, "upload")) == 2


def test_a_path_that_cannot_be_written_is_an_error_at_construction(tmp_path):
    with clbuf.trace(tmp_path):  # a folder
        with pytest.raises(clbuf.Error) as caught:
            clbuf.BufferManager()
    assert caught.value.code == -30  # CL_INVALID_VALUE
    assert str(tmp_path) in str(caught.value) and "clbuf.trace()" in str(caught.value)
    with clbuf.BufferManager() as bm:  # after the block: no tracing, no error
        bm.upload_to_device(_data())


def test_the_block_ends_even_when_its_body_raises(tmp_path):
    path = tmp_path / "t.json"
    with pytest.raises(ValueError):
        with clbuf.trace(path):
            with clbuf.BufferManager() as bm:
                bm.upload_to_device(_data())
                raise ValueError("the body failed")
    assert len(_spans(path, "upload")) == 1
    assert clbuf._trace_scope("") == ""  # nothing left set


@pytest.mark.parametrize("bad", ["", "t\0.json"])
def test_an_empty_path_or_one_holding_a_nul_is_refused_when_the_block_is_entered(bad, tmp_path):
    path = str(tmp_path / bad) if bad else bad
    with pytest.raises(clbuf.Error) as caught:
        with clbuf.trace(path):
            pytest.fail("the block ran")
    assert caught.value.code == -30  # CL_INVALID_VALUE
    assert "clbuf.trace()" in str(caught.value)
    assert ("NUL" in str(caught.value) and "t\\0.json" in str(caught.value)) if bad else (
        "empty" in str(caught.value))
    assert not (tmp_path / "t").exists()
    assert clbuf._trace_scope("") == ""  # nothing set


def test_every_spelling_of_one_file_is_one_file(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    (tmp_path / "sub").mkdir()
    path.write_text("old")
    (tmp_path / "link.json").symlink_to(path)
    (tmp_path / "hard.json").hardlink_to(path)
    monkeypatch.chdir(tmp_path)
    managers = []
    for spelling in ("t.json", "./t.json", "sub/../t.json", str(path), "link.json",
                     str(tmp_path / "hard.json")):
        with clbuf.trace(spelling):
            managers.append(clbuf.BufferManager())
    for manager in managers:
        manager.upload_to_device(_data())
    for manager in managers:
        manager.__exit__(None, None, None)
    assert len(_spans(path, "upload")) == len(managers)
    processes = [e for e in _events(path) if e.get("name") == "process_name"]
    assert len(processes) == len(managers)


def test_a_file_that_cannot_be_written_is_an_error_and_write_errors_are_listed(tmp_path):
    with clbuf.trace("/dev/full"):
        with pytest.raises(clbuf.Error) as caught:
            clbuf.BufferManager()
    assert "/dev/full" in str(caught.value) and "No space left on device" in str(caught.value)
    assert isinstance(clbuf.trace_write_errors(), str)
    assert "/dev/full" not in clbuf.trace_write_errors()  # refused at once: no write failed


def test_a_name_of_any_bytes_keeps_the_file_valid_utf8_json(tmp_path):
    path = tmp_path / "t.json"
    with clbuf.trace(path):
        with clbuf.BufferManager() as bm:
            bm.upload_to_device(_data())
    raw = path.read_bytes()
    raw.decode("utf-8")  # strict
    json.loads(raw)


_TRACING_FOREVER = """
import sys
import numpy as np
import clbuf
data = np.ones(256, np.float32)
with clbuf.trace(sys.argv[1]):
    bm = clbuf.BufferManager()
buffer = bm.upload_to_device(data)
print("ready", flush=True)
while True:
    bm.upload_into(buffer, data)
"""


def test_a_process_killed_while_it_traces_leaves_valid_json(tmp_path):
    """SIGKILL at random instants of a Python process tracing uploads as fast as it can: every
    file is strict UTF-8 JSON (the C++ suite kills 100 processes; this is the Python side)."""
    rng = random.Random(46)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for kill in range(4):
        path = tmp_path / f"k{kill}.json"
        child = subprocess.Popen([sys.executable, "-c", _TRACING_FOREVER, str(path)],
                                 stdout=subprocess.PIPE, env=env)
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.001, 0.2))
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL  # killed, not ended by an error
        child.stdout.close()
        json.loads(path.read_bytes().decode("utf-8"))
