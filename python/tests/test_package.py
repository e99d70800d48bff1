# SPDX-License-Identifier: MIT
"""The package as users install it: a Python package `clbuf` over the private extension
`clbuf._clbuf`, with the Python class Error, type stubs that match the extension, and py.typed.

With CLBUF_EXPECT_INSTALLED=1 (set by the python.cmake_install and python.pip_install tests) the
package must have been imported from CLBUF_EXPECT_LOCATION, and its metadata (pip's, or the
.dist-info cmake --install writes) must carry the version of include/clbuf/version.hpp
(clbuf.__version__, which the extension reads from there)."""
import ast
import importlib.metadata
import os
import pathlib

import pytest

import clbuf
import clbuf._clbuf as extension

PACKAGE = pathlib.Path(clbuf.__file__).resolve().parent


def test_error_is_a_python_class_of_the_package_raised_by_the_extension():
    assert clbuf.Error.__module__ == "clbuf"
    assert issubclass(clbuf.Error, RuntimeError)
    assert extension.Error is clbuf.Error
    with pytest.raises(clbuf.Error) as info:
        clbuf.BufferManager(b"gpu")  # checked before any device is looked for
    assert info.value.code == -30 and info.value.name == "CL_INVALID_VALUE"
    assert str(info.value).startswith("BufferManager: CL_INVALID_VALUE (-30): ")


def test_the_classes_are_the_extensions_shown_as_the_packages():
    for name in ("BufferManager", "Checkpoint", "DeviceBuffer", "DeviceGroup", "DeviceInfo",
                 "Future", "ShardedBuffer", "ShardedHalo", "Tile"):
        assert getattr(clbuf, name) is getattr(extension, name)
        assert getattr(clbuf, name).__module__ == "clbuf"
    assert sorted(clbuf.__all__) == sorted(
        ["BufferManager", "Checkpoint", "DeviceBuffer", "DeviceGroup", "DeviceInfo", "Error",
         "Future", "MappedArray", "Region", "ShardedBuffer", "ShardedHalo", "Tile",
         "__version__", "error_name", "explain_selection", "list_devices", "load", "plan_tiles",
         "save", "stream_tiles", "trace", "trace_write_errors"])
    assert clbuf.__version__.count(".") == 2


def _public(names):
    # __init__ left out: pybind11 gives every class one, constructible or not.
    kept = {"__version__", "__enter__", "__exit__", "__getitem__", "__len__"}
    return {n for n in names if not n.startswith("_") or n in kept}


def test_stubs_name_every_public_member_of_the_extension_and_nothing_else():
    stub = ast.parse((PACKAGE / "_clbuf.pyi").read_text())
    stubbed = {}
    for node in stub.body:
        if isinstance(node, ast.ClassDef):
            stubbed[node.name] = _public(
                {n.name for n in node.body if isinstance(n, ast.FunctionDef)})
        elif isinstance(node, ast.FunctionDef):
            stubbed[node.name] = None
        elif isinstance(node, ast.AnnAssign):
            stubbed[node.target.id] = None
    runtime = _public(dir(extension)) - {"Error"}  # Error: the package's, re-exported
    # clbuf.mpi's private classes and functions: all stubbed where the extension has MPI
    mpi = {n for n in stubbed if n.startswith(("_Mpi", "_mpi_"))}
    runtime_mpi = {n for n in dir(extension) if n.startswith(("_Mpi", "_mpi_"))}
    assert runtime_mpi in (set(), mpi)
    # private classes a public call returns (map()'s _Mapping, pinned_empty()'s base): stubbed
    private = {n for n in stubbed if n.startswith("_") and n != "__version__"} - mpi
    assert private <= set(dir(extension))
    assert set(stubbed) - mpi - private == runtime
    for name, members in stubbed.items():
        if members is None or name not in runtime | runtime_mpi | private:
            continue
        cls = getattr(extension, name)
        own = {n for n in vars(cls) if n not in ("__module__", "__doc__")}
        assert members == _public(own), name


def test_py_typed_marks_the_package_typed():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_clbuf.pyi").is_file()


@pytest.mark.skipif(os.environ.get("CLBUF_EXPECT_INSTALLED") != "1",
                    reason="the installed-package checks run in python.*_install")
def test_imported_from_the_installation():
    location = pathlib.Path(os.environ["CLBUF_EXPECT_LOCATION"]).resolve()
    assert location in PACKAGE.parents, (PACKAGE, location)
    extension_file = pathlib.Path(extension.__file__).resolve()
    assert extension_file.parent == PACKAGE
    # pip and cmake --install both install a .dist-info: the version and the files.
    assert importlib.metadata.version("clbuf") == clbuf.__version__
    files = {str(f) for f in importlib.metadata.files("clbuf")}
    assert {"clbuf/__init__.py", "clbuf/_clbuf.pyi", "clbuf/py.typed", "clbuf/cli.py"} <= files
    assert "mpi4py ; extra == 'mpi'" in importlib.metadata.requires("clbuf")  # setuptools' form
