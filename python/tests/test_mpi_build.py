# SPDX-License-Identifier: MIT
"""How pip's build (setup.py at the checkout's root) finds MPI for clbuf.mpi, with stand-in
compiler wrappers: MPICC, then mpicc on PATH, then mpi4py's; Open MPI's -showme and MPICH's
-show; CLBUF_BUILD_MPI OFF and ON. And what clbuf.mpi says in an extension built without it.
(python.pip_install builds with the real MPI and runs it on 2 ranks.)"""
import importlib.util
import pathlib
import sys
import types

import pytest

import clbuf

SETUP = pathlib.Path(__file__).resolve().parents[2] / "setup.py"


@pytest.fixture
def setup_py(monkeypatch):
    """setup.py as a module (it runs setup() only as __main__), with mpi4py's wrapper hidden."""
    if not SETUP.is_file():
        pytest.skip(f"no setup.py at {SETUP}")
    spec = importlib.util.spec_from_file_location("clbuf_setup_under_test", SETUP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_mpi4py_wrapper", lambda: None)
    return module


def wrapper(folder, name, script):
    """An executable shell script `folder/name` with the body `script`."""
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


OPEN_MPI = """case "$1" in
  -showme:compile) echo "-I/opt/ompi/include -pthread" ;;
  -showme:link) echo "-L/opt/ompi/lib -Wl,-rpath,/opt/ompi/lib -lmpi" ;;
  *) exit 1 ;;
esac
"""
MPICH = """case "$1" in
  -show) echo "gcc -I/opt/mpich/include -DMPICH_X=1 -L/opt/mpich/lib -lmpich -Wl,-rpath,/x" ;;
  *) echo "gcc: error: unrecognized command-line option '$1'" >&2; exit 1 ;;
esac
"""


def test_open_mpi_wrapper_in_mpicc_gives_the_flags(setup_py, tmp_path, capsys):
    mpicc = wrapper(tmp_path, "ompicc", OPEN_MPI)
    build = setup_py.mpi_build({"MPICC": mpicc, "PATH": str(tmp_path)})
    assert build == {"sources": ["python/src/mpi.cpp"],
                     "define_macros": [("CLBUF_PYTHON_MPI", "1"), ("OMPI_SKIP_MPICXX", "1"),
                                       ("MPICH_SKIP_MPICXX", "1")],
                     "extra_compile_args": ["-I/opt/ompi/include", "-pthread"],
                     "extra_link_args": ["-L/opt/ompi/lib", "-Wl,-rpath,/opt/ompi/lib", "-lmpi"]}
    assert f"clbuf: building clbuf.mpi with MPI from {mpicc} (MPICC): " in capsys.readouterr().err


def test_mpich_wrapper_on_path_splits_its_command_line(setup_py, tmp_path, capsys):
    wrapper(tmp_path, "mpicc", MPICH)
    build = setup_py.mpi_build({"PATH": str(tmp_path)})
    assert build["extra_compile_args"] == ["-I/opt/mpich/include", "-DMPICH_X=1"]
    assert build["extra_link_args"] == ["-L/opt/mpich/lib", "-lmpich", "-Wl,-rpath,/x"]
    assert "(mpicc on PATH)" in capsys.readouterr().err


def test_a_broken_mpicc_is_passed_over_for_the_next(setup_py, tmp_path, capsys):
    wrapper(tmp_path, "mpicc", OPEN_MPI)
    broken = str(tmp_path / "no-such-mpicc")
    build = setup_py.mpi_build({"MPICC": broken, "PATH": str(tmp_path)})
    assert build["extra_link_args"][-1] == "-lmpi"
    err = capsys.readouterr().err
    assert f"clbuf: {broken} (MPICC) gives no compile and link flags: not used" in err
    assert "(mpicc on PATH)" in err


def test_mpi4py_configuration_comes_last(setup_py, tmp_path, monkeypatch, capsys):
    mpicc = wrapper(tmp_path, "mpi4py-mpicc", OPEN_MPI)
    monkeypatch.setattr(setup_py, "_mpi4py_wrapper", lambda: mpicc)
    assert setup_py.mpi_build({"PATH": str(tmp_path / "empty")})["sources"] == ["python/src/mpi.cpp"]
    assert "(mpi4py.get_config())" in capsys.readouterr().err


def test_without_mpi_the_build_goes_on_without_clbuf_mpi(setup_py, tmp_path, capsys):
    assert setup_py.mpi_build({"PATH": str(tmp_path)}) == {}
    assert "clbuf: no MPI found (MPICC is not set, no mpicc on PATH, no mpi4py configuration): " \
        "building without clbuf.mpi" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="CLBUF_BUILD_MPI=ON, but no MPI found"):
        setup_py.mpi_build({"PATH": str(tmp_path), "CLBUF_BUILD_MPI": "on"})


def test_clbuf_build_mpi_off_and_a_wrong_value(setup_py, tmp_path, capsys):
    mpicc = wrapper(tmp_path, "mpicc", OPEN_MPI)
    assert setup_py.mpi_build({"MPICC": mpicc, "CLBUF_BUILD_MPI": "OFF"}) == {}
    assert "building without clbuf.mpi (CLBUF_BUILD_MPI=OFF)" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="must be ON, OFF or AUTO, not 'MAYBE'"):
        setup_py.mpi_build({"CLBUF_BUILD_MPI": "maybe"})


def test_an_extension_without_mpi_says_how_to_get_it(monkeypatch):
    # clbuf/mpi.py loaded again over an extension that has no MPI classes.
    monkeypatch.setitem(sys.modules, "clbuf._clbuf", types.ModuleType("clbuf._clbuf"))
    monkeypatch.setattr(clbuf, "_clbuf", sys.modules["clbuf._clbuf"], raising=False)
    spec = importlib.util.spec_from_file_location(
        "clbuf._mpi_without_mpi", pathlib.Path(clbuf.__file__).parent / "mpi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.BUILT is False
    for call in (lambda: module.Communicator(None), lambda: module.HaloExchange(None, []),
                 lambda: module.cartesian_faces(None, (4, 4), 1)):
        with pytest.raises(clbuf.Error) as info:
            call()
        assert info.value.code == -59
        message = str(info.value)
        assert ": CL_INVALID_OPERATION (-59): this clbuf extension was built without MPI" in message
        assert "apt install libopenmpi-dev python3-mpi4py" in message
        assert "pip install --no-build-isolation --force-reinstall ." in message
