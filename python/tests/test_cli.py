# SPDX-License-Identifier: MIT
"""The clbuf command (python/clbuf/cli.py) as users run it, `python3 -m clbuf` in a child
process, its output parsed. CTest runs these as python.cli_info, python.cli_bench and
python.cli_plot (by the test names' prefixes); installed (python.*_install), the command
`clbuf` the installation put in its bin/ is checked too."""
import csv
import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

import clbuf
import clbuf._clbuf as extension
from clbuf.cli import format_size, parse_size

PATHS = {"host_copy", "staged", "buffered", "bounced", "direct"}


def clbuf_command(*args, cwd, env=None, stderr=subprocess.PIPE):
    """`python3 -m clbuf ARGS` from `cwd` (so that only the installed package can be imported),
    with `env` added to this environment."""
    return subprocess.run([sys.executable, "-m", "clbuf", *args], cwd=cwd, text=True,
                          stdout=subprocess.PIPE, stderr=stderr, timeout=300,
                          env={**os.environ, **(env or {})})


def expected_path(options, nbytes, direction):
    """The path rule of include/clbuf/detail/transfer_engine.hpp, written out again here, for
    pageable host memory and a buffer of the pool."""
    memory = options["memory"]
    if memory == "host":
        return "host_copy"
    if memory == "discrete" and options["staging_threshold_bytes"] != options["never"] \
            and nbytes >= options["staging_threshold_bytes"]:
        return "staged"
    if memory == "discrete":
        if direction == "upload" and nbytes <= options["buffered_upload_max_bytes"]:
            return "buffered"
        if direction == "download" and nbytes <= options["bounce_max_bytes"]:
            return "bounced"
    return "direct"


def test_info_names_every_device_the_picked_one_and_its_paths(bm, tmp_path):
    done = clbuf_command("info", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    devices = clbuf.list_devices()
    assert f"OpenCL devices ({len(devices)}):" in out
    for device in devices:
        assert f"  {device.platform_index}:{device.device_index}  {device.name} (" in out
    picked = bm.device
    assert (f"picked: {picked.platform_index}:{picked.device_index} {picked.name} "
            f"({picked.type}, {picked.platform})") in out
    assert re.search(rf"^  memory model: +{bm.memory_model} \(", out, re.M)
    assert re.search(rf"^  global memory: +\S+ \S+ \({picked.global_mem_bytes} bytes\)", out, re.M)
    assert re.search(rf"^  max allocation: +\S+ \S+ \({picked.max_alloc_bytes} bytes\)", out, re.M)
    assert bm.explain_selection().splitlines()[0] in out

    # The path table covers 1 B to the largest allocation without a gap; each row is the
    # engine's rule at both its ends.
    rows = re.findall(r"^    (\d[\d,]* \w+) - (\d[\d,]* \w+) +(\w+) +(\w+)$", out, re.M)
    assert rows, out
    sizes = [(parse_size(first.replace(",", "")), parse_size(last.replace(",", "")), up, down)
             for first, last, up, down in rows]
    assert sizes[0][0] == 1 and sizes[-1][1] == picked.max_alloc_bytes
    options = extension._options(bm)
    for (first, last, up, down), following in zip(sizes, sizes[1:] + [None]):
        assert {up, down} <= PATHS
        if following is not None:
            assert following[0] == last + 1
        for nbytes in (first, last):
            assert up == expected_path(options, nbytes, "upload") == \
                extension._transfer_path(bm, nbytes, "upload")
            assert down == expected_path(options, nbytes, "download") == \
                extension._transfer_path(bm, nbytes, "download")
        for path in (up, down):
            assert re.search(rf"^    {path}: \S", out, re.M)
    if bm.memory_model == "host":
        assert [row[2:] for row in sizes] == [("host_copy", "host_copy")]


def test_info_says_how_much_fits_and_the_tiles_a_stream_would_choose(bm, tmp_path):
    import numpy as np
    done = clbuf_command("info", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    fits = bm.memory_report()
    assert fits["device_memory_bytes"] == bm.device.global_mem_bytes
    assert fits["max_alloc_bytes"] == bm.device.max_alloc_bytes
    stream = fits["stream"]
    assert 1 <= stream["in_flight"] <= 3 and stream["tile_elements"] >= 1
    assert stream["device_bytes"] <= stream["budget_bytes"]
    assert re.search(r"^  clbuf holds: +\d+ buffers \(", done.stdout, re.M), done.stdout
    assert re.search(rf"^  a tile stream: +{stream['in_flight']} tiles in flight of "
                     rf"{stream['tile_elements']} float32 elements", done.stdout, re.M), done.stdout
    held = bm.upload_to_device(np.zeros(1 << 16, dtype=np.float32))
    assert bm.memory_report()["buffers_bytes"] >= fits["buffers_bytes"] + (1 << 18)
    assert bm.memory_report(8)["stream"]["tile_elements"] <= stream["tile_elements"]
    del held


def test_info_honours_clbuf_device(bm, tmp_path):
    device = bm.device
    selector = f"{device.platform_index}:{device.device_index}"
    done = clbuf_command("info", cwd=tmp_path, env={"CLBUF_DEVICE": selector})
    assert done.returncode == 0, done.stderr
    assert f'"{selector}" (from CLBUF_DEVICE)' in done.stdout
    assert f"picked: {selector} {device.name} (" in done.stdout

    done = clbuf_command("info", cwd=tmp_path, env={"CLBUF_DEVICE": "no such device, really"})
    assert done.returncode == 1
    assert "nothing picked" in done.stdout
    assert done.stderr.startswith("clbuf info: no device to use: BufferManager: "
                                  "CL_DEVICE_NOT_FOUND (-1): ")


def test_info_without_a_device_fails_saying_how_to_get_one(tmp_path):
    # No ICD at all (an empty vendor folder), and PoCL told to offer no device, as the C++
    # no_device_test does.
    (tmp_path / "vendors").mkdir()
    done = clbuf_command("info", cwd=tmp_path,
                         env={"OCL_ICD_VENDORS": str(tmp_path / "vendors"),
                              "POCL_DEVICES": "bogus"})
    assert done.returncode == 1, done.stdout
    assert done.stderr == ("clbuf info: no OpenCL device: install an OpenCL driver (Debian: "
                           "pocl-opencl-icd for the CPU) and check with clinfo -l\n")
    assert "0 device(s)" in done.stdout
    done = clbuf_command("bench", cwd=tmp_path,
                         env={"OCL_ICD_VENDORS": str(tmp_path / "vendors"),
                              "POCL_DEVICES": "bogus"})
    assert done.returncode == 1 and done.stderr.startswith("clbuf bench: no OpenCL device: ")


def _pyopencl_methods():
    try:
        import pyopencl  # noqa: F401
    except ImportError:
        return []
    return ["pyopencl Buffer", "pyopencl Array"]


def test_bench_table_and_csv(bm, tmp_path):
    done = clbuf_command("bench", "--sizes", "4,1M", "--repeat", "3", "--csv", "out.csv",
                         cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar where stderr is not a terminal
    methods = ["clbuf", *_pyopencl_methods()]
    with open(tmp_path / "out.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["op"], int(r["bytes"]), r["method"]) for r in rows} == {
        (op, nbytes, method) for op in ("upload", "download", "round_trip")
        for nbytes in (4, 1 << 20) for method in methods}
    assert len(rows) == 6 * len(methods)
    clbuf_us = {(r["op"], r["bytes"]): float(r["median_us"]) for r in rows
                if r["method"] == "clbuf"}
    for r in rows:
        median_us, nbytes = float(r["median_us"]), int(r["bytes"])
        assert int(r["repetitions"]) == 3 and median_us > 0
        moved = nbytes * (2 if r["op"] == "round_trip" else 1)
        assert float(r["gigabytes_per_second"]) == pytest.approx(moved / median_us / 1e3,
                                                                 rel=1e-3)
        assert float(r["clbuf_ratio"]) == pytest.approx(
            clbuf_us[(r["op"], r["bytes"])] / median_us, rel=1e-3)

    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"device: {bm.device.name} (")
    header = next(line for line in lines if line.startswith("op "))
    assert header.split() == ["op", "size", "reps", "clbuf", "GB/s",
                              *[w for m in methods[1:] for w in (*m.split(), "ratio")]]
    for r in rows:
        if r["method"] == "clbuf":
            continue
        row = next(line for line in lines
                   if line.startswith(f"{r['op']} ")
                   and f" {format_size(int(r['bytes']))} " in line)
        ratios = re.findall(r"(\d+\.\d\d)x", row)
        shown = float(ratios[methods.index(r["method"]) - 1])
        assert shown == pytest.approx(float(r["clbuf_ratio"]), abs=0.0051)
    assert lines[-1] == "csv: out.csv"


def test_bench_rejects_a_size_it_cannot_read(tmp_path):
    done = clbuf_command("bench", "--sizes", "4,lots", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("clbuf bench: --sizes: 'lots' is not a size")


def test_plot_is_a_png_and_a_terminal_sees_progress(bm, tmp_path):
    pytest.importorskip("matplotlib")
    import pty

    controller, terminal = pty.openpty()
    try:
        done = clbuf_command("bench", "--sizes", "4,1K", "--ops", "round_trip", "--repeat", "2",
                             "--plot", "bandwidth.png", cwd=tmp_path, stderr=terminal)
        os.close(terminal)
        terminal = None
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if terminal is not None:
            os.close(terminal)
        os.close(controller)
    assert done.returncode == 0, shown
    assert b"\r[" in shown and b"] 2/2 round_trip 1 KiB" in shown
    png = (tmp_path / "bandwidth.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert done.stdout.splitlines()[-1] == "plot: bandwidth.png"


@pytest.mark.skipif(os.environ.get("CLBUF_EXPECT_INSTALLED") != "1",
                    reason="the installed command is checked in python.*_install")
def test_installed_command(tmp_path):
    # pip's console script, or the script cmake --install writes: either is in the RECORD.
    import importlib.metadata

    scripts = [f for f in importlib.metadata.files("clbuf") if f.parts[-2:] == ("bin", "clbuf")]
    assert len(scripts) == 1, importlib.metadata.files("clbuf")
    script = pathlib.Path(scripts[0].locate()).resolve()
    done = subprocess.run([str(script), "--version"], cwd=tmp_path, text=True,
                          stdout=subprocess.PIPE, timeout=60)
    assert done.returncode == 0 and done.stdout == f"clbuf {clbuf.__version__}\n"


# ---- bad invocations: one line `clbuf <command>: <message>`, status 1, checked before any work --

def run_main(capture, *argv):
    """cli.main(argv) in this process: (status, stdout, stderr) as pytest's `capture` fixture
    (capsys or capfd) caught them."""
    from clbuf.cli import main

    status = main(list(argv))
    captured = capture.readouterr()
    return status, captured.out, captured.err


def unwritable_paths(tmp_path):
    """Paths no file can be written at, each with a word of the reason."""
    (tmp_path / "a_folder").mkdir()
    paths = [("", ("empty path",)), (str(tmp_path / "missing" / "out"), ("No such file",)),
             (str(tmp_path / "a_folder"), ("directory",))]
    if os.path.exists("/dev/full"):
        paths.append(("/dev/full", ("No space left",)))
    if os.geteuid() != 0:
        (tmp_path / "read_only").write_text("kept")
        (tmp_path / "read_only").chmod(0o444)
        paths.append((str(tmp_path / "read_only"), ("Permission denied",)))
    read_only = "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"  # even for root
    if os.path.exists(read_only):
        paths.append((read_only, ("Permission denied", "Read-only file system")))
    return paths


BAD_BENCH_ARGUMENTS = [
    (["--budget", "nan"], "--budget: 'nan'"), (["--budget", "inf"], "--budget: 'inf'"),
    (["--budget", "-inf"], "--budget"), (["--budget", "1e308"], "--budget: '1e308'"),
    (["--budget", "3601"], "--budget"), (["--budget", "-1"], "--budget"),
    (["--budget", "0"], "--budget"), (["--budget", "-0"], "--budget"),
    (["--budget", "1e-400"], "--budget"), (["--budget", "fast"], "--budget: 'fast'"),
    (["--budget", ""], "--budget"), (["--budget", "0x10"], "--budget"),
    (["--repeat", "-1"], "--repeat: '-1'"), (["--repeat", "1.5"], "--repeat"),
    (["--repeat", "many"], "--repeat"), (["--repeat", ""], "--repeat"),
    (["--repeat", str(10 ** 30)], "--repeat"), (["--repeat", "1000001"], "--repeat"),
    (["--sizes", ""], "--sizes names no size"), (["--sizes", ",, ,"], "--sizes names no size"),
    (["--sizes", "0"], "--sizes: '0' is not a size"), (["--sizes", "4,-4"], "--sizes: '-4'"),
    (["--sizes", "1e3"], "--sizes: '1e3'"), (["--sizes", "4,lots"], "--sizes: 'lots'"),
    (["--sizes", "4K4"], "--sizes"), (["--sizes", "0K"], "--sizes"),
    (["--sizes", "99999999999999999999999999G"], "more bytes than any device holds"),
    (["--sizes", "16777217T"], "--sizes"), (["--sizes", "17179869185G"], "more bytes than any"),
    (["--sizes", "9" * 5000], "more bytes than any device holds"),
    (["--sizes", "64G,4"], "--sizes: 64 GiB is more than the device's largest allocation"),
    (["--ops", ""], "--ops takes upload"), (["--ops", "upload,bogus"], "--ops takes upload"),
    (["--device", "no such device, really"], "no device to use"),
    (["--bogus"], "unrecognized arguments: --bogus"), (["extra"], "unrecognized arguments"),
    (["--sizes"], "argument --sizes: expected one argument"),
]


@pytest.mark.parametrize("arguments,words", BAD_BENCH_ARGUMENTS,
                         ids=[" ".join(a)[:40] for a, _ in BAD_BENCH_ARGUMENTS])
def test_bench_refuses_each_bad_argument_in_one_line_before_measuring(bm, capsys, tmp_path,
                                                                      arguments, words):
    # A --csv file this run makes is removed again: nothing is left where the run failed.
    csv_path = tmp_path / "out.csv"
    status, out, err = run_main(capsys, "bench", "--sizes", "4", "--repeat", "1",
                                "--no-pyopencl", "--csv", str(csv_path), *arguments)
    assert status == 1, (out, err)
    assert err.startswith("clbuf bench: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert words in err, err
    assert "device:" not in out and "op " not in out, out  # nothing was measured
    assert not csv_path.exists()


def test_bench_checks_its_files_before_measuring_and_leaves_none_behind(bm, capsys, tmp_path):
    paths = unwritable_paths(tmp_path)
    for option in ("--csv", "--plot"):
        for path, reason in paths:
            status, out, err = run_main(capsys, "bench", "--sizes", "4", "--repeat", "1",
                                        "--no-pyopencl", option, path)
            assert status == 1 and out == "", (option, path, out, err)
            if option == "--plot" and importlib.util.find_spec("matplotlib") is None:
                assert err.startswith("clbuf bench: --plot needs matplotlib"), err
                continue
            assert err.startswith(f"clbuf bench: {option} {path!r}: cannot write there: "), err
            assert any(r in err for r in reason) and err.count("\n") == 1, (reason, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["a_folder"] + (["read_only"] if os.geteuid() != 0 else []))

    # One file for both, and a file that was there is left as it was when the run fails.
    both = str(tmp_path / "both")
    status, _, err = run_main(capsys, "bench", "--csv", both, "--plot", both)
    assert status == 1 and not os.path.exists(both)
    if importlib.util.find_spec("matplotlib") is not None:
        assert "are one file" in err, err
    kept = tmp_path / "kept.csv"
    kept.write_text("a file of the user's\n")
    status, _, err = run_main(capsys, "bench", "--sizes", "4", "--repeat", "1", "--csv",
                              str(kept), "--device", "no such device, really")
    assert status == 1 and "no device to use" in err, err
    assert kept.read_text() == "a file of the user's\n"


def test_bench_accepts_the_edges_of_its_ranges(bm, capfd, tmp_path):
    # capfd: the CSV goes to /dev/stdout, file descriptor 1, after the table
    status, out, err = run_main(capfd, "bench", "--sizes", " 4B ,4,1KiB", "--ops",
                                "upload,upload", "--budget", "1e-300", "--no-pyopencl", "--csv",
                                "/dev/stdout")
    assert status == 0, err
    table = [line.split() for line in out.splitlines() if line.startswith("upload ")]
    assert [row[:4] for row in table] == [["upload", "4", "B", "3"], ["upload", "1", "KiB", "3"]]
    assert "op,bytes,method,repetitions" in out  # the CSV on stdout, after the table
    status, out, err = run_main(capfd, "bench", "--sizes", "4", "--ops", "round_trip",
                                "--repeat", "1", "--budget", "3600", "--no-pyopencl")
    assert status == 0 and err == "", err


def test_info_and_the_command_refuse_bad_invocations_in_one_line(capsys):
    for argv, start, words in ((["info", "--bogus"], "clbuf info: ", "--bogus"),
                               (["info", "extra"], "clbuf info: ", "extra"),
                               ([], "clbuf: ", "required: command"),
                               (["nope"], "clbuf: ", "invalid choice: 'nope'")):
        status, out, err = run_main(capsys, *argv)
        assert status == 1 and out == "", (argv, out, err)
        assert err.startswith(start) and words in err and err.count("\n") == 1, (argv, err)


def test_info_names_an_unwritable_trace_file_not_a_missing_device(bm, tmp_path):
    trace = str(tmp_path / "missing" / "trace.json")
    for command in ("info", "bench"):
        done = clbuf_command(command, "--sizes", "4", cwd=tmp_path, env={"CLBUF_TRACE": trace}) \
            if command == "bench" else clbuf_command(command, cwd=tmp_path,
                                                     env={"CLBUF_TRACE": trace})
        assert done.returncode == 1, done.stdout
        assert done.stderr.startswith(f"clbuf {command}: "), done.stderr
        assert trace in done.stderr and "no device to use" not in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_bench_issue_46_arguments_end_in_a_message_not_a_traceback(bm, tmp_path):
    # The command as users run it, in a child process: the cases issue 46 found.
    for arguments in (["--budget", "nan"], ["--budget", "inf"], ["--budget", "1e308"],
                      ["--csv", str(tmp_path / "missing" / "a.csv")], ["--csv", "/dev/full"],
                      ["--plot", str(tmp_path)]):
        start = time.monotonic()
        done = clbuf_command("bench", "--sizes", "4,1K", *arguments, cwd=tmp_path)
        assert done.returncode == 1 and done.stdout == "", (arguments, done.stdout)
        assert done.stderr.startswith("clbuf bench: ") and done.stderr.count("\n") == 1, \
            (arguments, done.stderr)
        assert time.monotonic() - start < 60  # refused first, not after a benchmark


def test_info_output_that_cannot_be_written_is_said_once(bm, tmp_path):
    # stdout on a full device: one line, status 1, no traceback.
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "clbuf", "info"], cwd=tmp_path, text=True,
                              stdout=full, stderr=subprocess.PIPE, timeout=300)
    assert done.returncode == 1
    assert done.stderr.startswith("clbuf info: cannot write the output: No space left"), \
        done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "clbuf", "--version"], cwd=tmp_path,
                              text=True, stdout=full, stderr=subprocess.PIPE, timeout=300)
    assert done.returncode == 1 and "No space left" in done.stderr, done.stderr
    # A reader that left (`clbuf info | head -0`): status 1 and nothing on stderr.
    child = subprocess.Popen([sys.executable, "-m", "clbuf", "info"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    _, err = child.communicate(timeout=300)
    assert child.returncode == 1 and err == b"", err
