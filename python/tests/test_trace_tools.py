# SPDX-License-Identifier: MIT
"""The trace tools of issue 37 on files made here: scripts/trace_merge.py finds a run's rank
files from the path they were named after, keeps flow arrows, and moves the processes of a later
file whose pids an earlier one took; bench/trace_plot.py draws a PNG (where matplotlib imports).
Standard library and the scripts only: no device needed."""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
MERGE = ROOT / "scripts" / "trace_merge.py"
PLOT = ROOT / "bench" / "trace_plot.py"


def _rank_file(path, pid, flow_phase):
    events = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
         "args": {"name": f"rank {pid}: dev"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1,
         "args": {"name": "MPI messages, lane 0"}},
        {"ph": "X", "cat": "clbuf", "name": "send" if flow_phase == "s" else "receive",
         "pid": pid, "tid": 1, "ts": 100.0 + pid, "dur": 10.0, "args": {"bytes": 8}},
        dict({"ph": flow_phase, "cat": "clbuf", "name": "MPI message", "pid": pid, "tid": 1,
              "ts": 105.0 + pid, "id": 77, "args": {}}, **({"bp": "e"} if flow_phase == "f" else {})),
    ]
    path.write_text(json.dumps({"traceEvents": events}))


def _merge(*args):
    done = subprocess.run([sys.executable, str(MERGE), *map(str, args)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done


def test_the_rank_files_of_a_path_merge_with_their_arrow(tmp_path):
    _rank_file(tmp_path / "t.rank0.json", 0, "s")
    _rank_file(tmp_path / "t.rank1.json", 1, "f")
    (tmp_path / "t.rank1.other.json").write_text("not a rank file")
    out = tmp_path / "merged.json"
    _merge("-o", out, tmp_path / "t.json")
    events = json.loads(out.read_text())["traceEvents"]
    assert sorted({e["pid"] for e in events}) == [0, 1]
    flows = sorted((e["ph"], e["pid"]) for e in events if e["name"] == "MPI message")
    assert flows == [("f", 1), ("s", 0)]


def test_a_later_files_taken_pids_are_moved(tmp_path):
    _rank_file(tmp_path / "a.json", 0, "s")
    _rank_file(tmp_path / "b.json", 0, "f")
    events = json.loads(_merge(tmp_path / "a.json", tmp_path / "b.json").stdout)["traceEvents"]
    pids = {e["pid"] for e in events}
    assert len(pids) == 2 and 0 in pids
    moved = (pids - {0}).pop()
    assert {e["ph"] for e in events if e["pid"] == moved} == {"M", "X", "f"}


def test_no_file_and_no_rank_files_is_an_error(tmp_path):
    done = subprocess.run([sys.executable, str(MERGE), str(tmp_path / "none.json")],
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "none.rank0.json" in done.stderr


def test_trace_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    _rank_file(tmp_path / "t.rank0.json", 0, "s")
    _rank_file(tmp_path / "t.rank1.json", 1, "f")
    _merge("-o", tmp_path / "m.json", tmp_path / "t.json")
    png = tmp_path / "m.png"
    done = subprocess.run([sys.executable, str(PLOT), str(tmp_path / "m.json"), "-o", str(png),
                           "--from", "send", "--to", "receive"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
