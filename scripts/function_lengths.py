#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Lists the functions of include/ longer than the house limit (issue 34).

    /usr/bin/python3 scripts/function_lengths.py             the functions over the limits
    /usr/bin/python3 scripts/function_lengths.py --all       every function, longest first
    /usr/bin/python3 scripts/function_lengths.py --check     also exit 1 when one is over

A function's length is its lines from the first of its declaration (after its doc comment and
template line) to its closing brace. The limits: 40 lines, and 30 for the members of
BufferManager (the facade in include/clbuf/manager.hpp). The C++ is read as text, not parsed:
braces are counted outside comments, strings and character literals, and a brace that opens a
namespace, class, struct, union, enum or an initialiser is not a function's.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT = 40
FACADE_LIMIT = 30
FACADE = ("include/clbuf/manager.hpp", "BufferManager")

CONTAINER = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace\b|class\b|struct\b|union\b|enum\b|"
                       r"extern\s+\"C\")")
NAME = re.compile(r"(~?[A-Za-z_][\w:]*|operator\s*[^\s(]+)\s*\((?!\*)")
KEYWORDS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignof",
            "static_assert", "noexcept", "alignas", "throw"}


def code_of(line, state):
    """The line without comments, strings and character literals; `state` carries an open /*."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["block"] = False
            i = end + 2
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        if c in "\"'":
            j = i + 1
            while j < len(line) and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    """(name, first line, last line, enclosing classes) of each function defined in `path`."""
    state = {"block": False}
    codes = [code_of(line, state) for line in path.read_text().splitlines()]
    found = []
    scopes = []  # ("container", name) or ("other", None), one per open brace outside functions
    i = 0
    while i < len(codes):
        code = codes[i]
        opens = code.count("{")
        closes = code.count("}")
        stripped = code.strip()
        if opens > closes and stripped.endswith("{"):
            start = i
            while start > 0:  # the declaration's first line
                before = codes[start - 1].strip()
                if (not before or before.endswith((";", "}", "{", ":")) or
                        before.startswith(("template", "#")) and not before.endswith(",")):
                    break
                start -= 1
            head = " ".join(c.strip() for c in codes[start:i + 1])
            match = CONTAINER.match(head)
            if match:
                name = re.findall(r"(?:class|struct|union|namespace)\s+(?:\[\[\w+\]\]\s*)?(\w+)",
                                  head)
                scopes.append(("container", name[0] if name else ""))
                i += 1
                continue
            calls = [m.group(1) for m in NAME.finditer(head.split("{")[0])
                     if m.group(1) not in KEYWORDS]
            is_function = bool(calls) and not re.search(r"=\s*(\[.*\]\s*)?\{$", head) and \
                not re.search(r"\)\s*=\s*", head.split("(")[0])
            if not is_function or not all(kind == "container" for kind, _ in scopes):
                scopes.append(("other", None))
                i += 1
                continue
            depth = 0
            end = i
            for end in range(i, len(codes)):
                depth += codes[end].count("{") - codes[end].count("}")
                if depth <= 0:
                    break
            classes = [name for kind, name in scopes if kind == "container"]
            found.append((calls[0], start + 1, end + 1, classes))
            i = end + 1
            continue
        for _ in range(closes - opens):
            if scopes:
                scopes.pop()
        for _ in range(opens - closes):
            scopes.append(("other", None))
        i += 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="every function, longest first")
    parser.add_argument("--check", action="store_true", help="exit 1 when one is over its limit")
    args = parser.parse_args()
    rows = []
    for path in sorted((ROOT / "include").rglob("*.hpp")):
        relative = str(path.relative_to(ROOT))
        for name, first, last, classes in functions(path):
            facade = relative == FACADE[0] and FACADE[1] in classes
            limit = FACADE_LIMIT if facade else LIMIT
            length = last - first + 1
            scope = "::".join(c for c in classes if c and c not in ("clbuf", "detail", "mpi"))
            qualified = f"{scope}::{name}" if scope and "::" not in name else name
            rows.append((length, limit, relative, first, qualified))
    rows.sort(key=lambda row: (-row[0], row[2], row[3]))
    over = [row for row in rows if row[0] > row[1]]
    for length, limit, relative, first, name in rows if args.all else over:
        print(f"{length:4d} lines (limit {limit}) {relative}:{first} {name}")
    print(f"function_lengths: {len(over)} of {len(rows)} functions over their limit")
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main())
