# SPDX-License-Identifier: MIT
"""The .dist-info of the package clbuf as `cmake --install` installs it (python/CMakeLists.txt),
so that pip and importlib.metadata know it as they know a pip install (`pip show clbuf`,
`pip uninstall clbuf`):

    dist_info.py metadata PYPROJECT VERSION FOLDER   METADATA, entry_points.txt, top_level.txt
                                                     and INSTALLER, from pyproject.toml
    dist_info.py record PREFIX SITE FOLDER_NAME PYTHON
                                                     at install: PREFIX/bin/clbuf (the command,
                                                     run by PREFIX/bin/python3 where there is
                                                     one, a virtual environment, else PYTHON) and
                                                     PREFIX/SITE/FOLDER_NAME/RECORD: every file
                                                     of PREFIX/SITE/clbuf, the command and the
                                                     .dist-info, as pip records them

The metadata is pyproject.toml's [project] table, written as setuptools writes it (core
metadata 2.1), the version given (include/clbuf/version.hpp, as for pip).
"""
import base64
import hashlib
import os
import pathlib
import sys


def _pyproject(path):
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def write_metadata(pyproject, version, folder):
    """Writes METADATA, entry_points.txt, top_level.txt and INSTALLER into `folder`."""
    project = _pyproject(pyproject)["project"]
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {version}",
             f"Summary: {project.get('description', '')}"]
    if "license" in project:
        lines.append(f"License: {project['license'].get('text', '')}")
    lines += [f"Classifier: {c}" for c in project.get("classifiers", [])]
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {r} ; extra == '{extra}'" for r in requirements]
    readme = project.get("readme")
    body = ""
    if isinstance(readme, str):
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + (pathlib.Path(pyproject).parent / readme).read_text()
    (folder / "METADATA").write_text("\n".join(lines) + "\n" + body)
    scripts = project.get("scripts", {})
    (folder / "entry_points.txt").write_text(
        "[console_scripts]\n" + "".join(f"{n} = {t}\n" for n, t in scripts.items())
        if scripts else "")
    (folder / "top_level.txt").write_text("clbuf\n")
    (folder / "INSTALLER").write_text("cmake\n")


def _hash(path):
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def write_record(prefix, site, folder_name, python):
    """At install time: writes the command PREFIX/bin/clbuf and RECORD (see the module's text)."""
    prefix = pathlib.Path(prefix)
    site = prefix / site
    bin_folder = prefix / "bin"
    interpreter = bin_folder / "python3" if (bin_folder / "python3").exists() else python
    bin_folder.mkdir(parents=True, exist_ok=True)
    script = bin_folder / "clbuf"
    script.write_text(f"#!{interpreter}\n# The clbuf command (installed by cmake --install).\n"
                      "import sys\n\nfrom clbuf.cli import main\n\nsys.exit(main())\n")
    script.chmod(0o755)
    files = sorted(p for p in [*(site / "clbuf").rglob("*"), *(site / folder_name).iterdir()]
                   if p.is_file() and p.name != "RECORD" and "__pycache__" not in p.parts)
    rows = [f"{p.relative_to(site).as_posix()},{_hash(p)},{p.stat().st_size}" for p in files]
    rows.append(f"{os.path.relpath(script, site)},{_hash(script)},{script.stat().st_size}")
    rows.append(f"{folder_name}/RECORD,,")
    (site / folder_name / "RECORD").write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "metadata":
        write_metadata(*sys.argv[2:])
    elif len(sys.argv) == 6 and sys.argv[1] == "record":
        write_record(*sys.argv[2:])
    else:
        sys.exit(__doc__)
