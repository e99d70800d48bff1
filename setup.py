# SPDX-License-Identifier: MIT
"""Builds the extension clbuf._clbuf for pip (pyproject.toml holds the rest of the metadata).

The version comes from include/clbuf/version.hpp. The build folder is build-wheel/ (git ignores
it); every header of include/ is a dependency of the extension, so a changed header rebuilds it.

clbuf.mpi (python/src/mpi.cpp) is built in wherever MPI is found, looked for as mpi4py looks for it:
the compiler wrapper in MPICC, else `mpicc` on PATH, else the one mpi4py was built with
(mpi4py.get_config()); its flags come from `mpicc -showme:compile` / `-showme:link` (Open MPI)
or `mpicc -show` (MPICH). CLBUF_BUILD_MPI=OFF builds without it, ON fails without MPI (AUTO,
the default: with MPI where found). The build says which (`pip install -v` shows it).
"""
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent
SOURCES = ROOT / "python" / "src"  # the extension's C++ (pybind11)


def _say(message):
    print(f"clbuf: {message}", file=sys.stderr, flush=True)


def _wrapper_output(mpicc, *args):
    """What `mpicc ARGS` prints, split into words; None where it cannot run or fails."""
    try:
        done = subprocess.run([mpicc, *args], capture_output=True, text=True, timeout=60,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return shlex.split(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def wrapper_flags(mpicc):
    """(compile flags, link flags) of the MPI compiler wrapper `mpicc`, or None where it gives
    none: Open MPI's -showme:compile / -showme:link, else MPICH's -show (the compiler's command
    line, split into the flags that compile and the ones that link)."""
    compile_flags = _wrapper_output(mpicc, "-showme:compile")
    link_flags = _wrapper_output(mpicc, "-showme:link")
    if compile_flags is not None and link_flags is not None:
        return compile_flags, link_flags
    words = _wrapper_output(mpicc, "-show")
    if not words:
        return None
    compile_flags, link_flags = [], []
    words = iter(words[1:])  # words[0] is the compiler
    for word in words:
        if word in ("-isystem", "-include"):
            compile_flags += [word, next(words, "")]
        elif word.startswith(("-I", "-D", "-isystem")):
            compile_flags.append(word)
        elif word == "-pthread":
            compile_flags.append(word)
            link_flags.append(word)
        else:
            link_flags.append(word)
    return compile_flags, link_flags


def _mpi4py_wrapper():
    try:
        import mpi4py
        return mpi4py.get_config().get("mpicc")
    except Exception:  # noqa: BLE001 - no mpi4py, or one without a configuration
        return None


def find_mpi(environ=os.environ):
    """(wrapper, where it came from, compile flags, link flags) of the first MPI compiler wrapper
    that gives its flags: MPICC, `mpicc` on PATH, mpi4py's; None where there is none. Each one
    tried and left is reported."""
    candidates = []
    if environ.get("MPICC"):
        candidates.append((environ["MPICC"], "MPICC"))
    on_path = shutil.which("mpicc", path=environ.get("PATH", os.defpath))
    if on_path:
        candidates.append((on_path, "mpicc on PATH"))
    from_mpi4py = _mpi4py_wrapper()
    if from_mpi4py:
        candidates.append((from_mpi4py, "mpi4py.get_config()"))
    for wrapper, origin in candidates:
        flags = wrapper_flags(wrapper)
        if flags is not None:
            return (wrapper, origin, *flags)
        _say(f"{wrapper} ({origin}) gives no compile and link flags: not used")
    return None


def mpi_build(environ=os.environ):
    """The extension's sources, macros and flags for clbuf.mpi as CLBUF_BUILD_MPI (OFF, ON or
    AUTO) and find_mpi() decide: a dict of extra Pybind11Extension arguments, empty without it.
    Says which on stderr; raises SystemExit for ON without MPI."""
    mode = environ.get("CLBUF_BUILD_MPI", "AUTO").strip().upper() or "AUTO"
    if mode not in ("ON", "OFF", "AUTO"):
        raise SystemExit(f"clbuf: CLBUF_BUILD_MPI must be ON, OFF or AUTO, not {mode!r}")
    if mode == "OFF":
        _say("building without clbuf.mpi (CLBUF_BUILD_MPI=OFF)")
        return {}
    found = find_mpi(environ)
    if found is None:
        message = ("no MPI found (MPICC is not set, no mpicc on PATH, no mpi4py configuration): "
                   "building without clbuf.mpi; for it install MPI's development files (Debian: "
                   "apt install libopenmpi-dev python3-mpi4py) and reinstall")
        if mode == "ON":
            raise SystemExit(f"clbuf: CLBUF_BUILD_MPI=ON, but {message}")
        _say(message)
        return {}
    wrapper, origin, compile_flags, link_flags = found
    _say(f"building clbuf.mpi with MPI from {wrapper} ({origin}): compile "
         f"{' '.join(compile_flags) or '(no flags)'}, link {' '.join(link_flags) or '(no flags)'}")
    # clbuf::mpi calls MPI's C API: the C++ bindings Open MPI's and MPICH's mpi.h declare for C++
    # (libmpi_cxx, which mpicc does not link) are left out, as mpi4py leaves them out.
    macros = [("CLBUF_PYTHON_MPI", "1"), ("OMPI_SKIP_MPICXX", "1"), ("MPICH_SKIP_MPICXX", "1")]
    return {"sources": ["python/src/mpi.cpp"], "define_macros": macros,
            "extra_compile_args": compile_flags, "extra_link_args": link_flags}


def main():
    """Builds the extension (with clbuf.mpi where mpi_build() finds MPI) and the package."""
    from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
    from setuptools import setup

    # The sources compile at once, one a core (CLBUF_BUILD_JOBS=N: N at once).
    ParallelCompile("CLBUF_BUILD_JOBS").install()

    header = (ROOT / "include" / "clbuf" / "version.hpp").read_text()
    version = ".".join(re.search(rf"#define CLBUF_VERSION_{part} (\d+)", header).group(1)
                       for part in ("MAJOR", "MINOR", "PATCH"))
    mpi = mpi_build()
    # Relative paths below are the checkout's: pip builds in it.
    build = ROOT / "build-wheel"
    build.mkdir(exist_ok=True)
    # The extension is rebuilt only when a file it depends on is newer than it: this one changes
    # with the MPI configuration, so a reinstall after MPI was installed (or removed) rebuilds.
    stamp = build / "mpi-configuration.txt"
    configuration = repr(sorted(mpi.items()))
    if not stamp.is_file() or stamp.read_text() != configuration:
        stamp.write_text(configuration)
    extension = Pybind11Extension(
        "clbuf._clbuf",
        sorted(str(p.relative_to(ROOT)) for p in SOURCES.glob("*.cpp")
               if p.name != "mpi.cpp") + mpi.get("sources", []),
        include_dirs=["include"],
        libraries=["OpenCL"],
        define_macros=mpi.get("define_macros", []),
        depends=sorted(str(p.relative_to(ROOT))
                       for p in [*(ROOT / "include").rglob("*.hpp"),
                                 *SOURCES.glob("*.hpp"), stamp]),
        cxx_std=17,
        # No debug information: a quarter of the build time and most of the file's size.
        extra_compile_args=["-g0", *mpi.get("extra_compile_args", [])],
        extra_link_args=mpi.get("extra_link_args", []),
    )

    setup(
        version=version,
        ext_modules=[extension],
        cmdclass={"build_ext": build_ext},
        options={"build": {"build_base": "build-wheel"}, "egg_info": {"egg_base": "build-wheel"}},
    )


# pip runs this file as __main__ (setuptools.build_meta); python/tests import it for mpi_build().
if __name__ == "__main__":
    main()
