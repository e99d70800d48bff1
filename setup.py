# SPDX-License-Identifier: MIT
"""Builds the extension clbuf._clbuf for pip (pyproject.toml holds the rest of the metadata).

The version comes from include/clbuf/version.hpp. The build folder is build-wheel/ (git ignores
it); every header of include/ is a dependency of the extension, so a changed header rebuilds it.
"""
import pathlib
import re

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

ROOT = pathlib.Path(__file__).resolve().parent
HEADER = (ROOT / "include" / "clbuf" / "version.hpp").read_text()
VERSION = ".".join(re.search(rf"#define CLBUF_VERSION_{part} (\d+)", HEADER).group(1)
                   for part in ("MAJOR", "MINOR", "PATCH"))

extension = Pybind11Extension(
    "clbuf._clbuf",
    # python/mpi.cpp (clbuf.mpi) needs MPI: CMake builds it where MPI is found.
    sorted(str(p.relative_to(ROOT)) for p in (ROOT / "python").glob("*.cpp") if p.name != "mpi.cpp"),
    include_dirs=["include"],
    libraries=["OpenCL"],
    depends=sorted(str(p.relative_to(ROOT))
                   for p in [*(ROOT / "include").rglob("*.hpp"), *(ROOT / "python").glob("*.hpp")]),
    cxx_std=17,
    # No debug information: a quarter of the build time and most of the file's size.
    extra_compile_args=["-g0"],
)

# Relative paths below are the checkout's: pip builds in it.
(ROOT / "build-wheel").mkdir(exist_ok=True)

setup(
    version=VERSION,
    ext_modules=[extension],
    cmdclass={"build_ext": build_ext},
    options={"build": {"build_base": "build-wheel"}, "egg_info": {"egg_base": "build-wheel"}},
)
