# SPDX-License-Identifier: MIT
"""``with clbuf.trace(path):`` (issue 37): the managers made inside the block write a Chrome
trace (valid JSON once the block ends), those made before it do not, an inner block wins until it
ends, the block wins over CLBUF_TRACE, and a path that cannot be written is a clbuf.Error at the
manager's construction."""
import json

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
