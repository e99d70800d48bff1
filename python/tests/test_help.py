# SPDX-License-Identifier: MIT
"""help() as a Python user reads it (issue 35): every public class, function, method and
property of clbuf and clbuf.mpi (with and without MPI built) says in a sentence what it is; every
signature names Python types, never pybind11's `handle` or `object`; and each signature is the
one python/clbuf/_clbuf.pyi gives type checkers, argument for argument."""
import ast
import importlib.util
import inspect
import pathlib
import re
import types

import pytest

import clbuf
import clbuf._clbuf as extension
import clbuf.mpi

PACKAGE = pathlib.Path(clbuf.__file__).resolve().parent
STUB = ast.parse((PACKAGE / "_clbuf.pyi").read_text())
# Methods named like Python's protocols that belong to the API (help() lists them).
API_DUNDERS = {"__init__", "__enter__", "__exit__", "__getitem__", "__len__"}
SIGNATURE = re.compile(r"^(\w*)\((.*)\) -> (.*)$")


def _signature_line(doc):
    """The signature pybind11 writes on a docstring's first line, or None (a Python function)."""
    first = (doc or "").splitlines()[0] if doc else ""
    return first if SIGNATURE.match(first) else None


def _text(doc):
    """A docstring without pybind11's signature line."""
    doc = doc or ""
    if _signature_line(doc):
        doc = doc.split("\n", 1)[1] if "\n" in doc else ""
    return doc.strip()


def _says_something(doc):
    text = _text(doc)
    return bool(re.search(r"[A-Za-z]{2,}", text)) and bool(re.search(r"[.?!:)'`]\s|[.]$", text))


def _members(cls):
    """(name, object) of a class's own public attributes and its API dunders."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in API_DUNDERS:
            continue
        yield name, value


def _documented(module):
    """(qualified name, docstring, pybind11 signature or None) of everything public in `module`
    and in its classes."""
    yield module.__name__, module.__doc__, None
    names = [n for n in module.__all__ if not n.startswith("__")]
    for name in names:
        value = getattr(module, name)
        if not (inspect.isclass(value) or callable(value)):
            continue  # constants
        yield from _documented_object(f"{module.__name__}.{name}", value)


def _documented_object(qualified, value):
    if inspect.isclass(value):
        yield qualified, value.__doc__, None
        for member, attribute in _members(value):
            if attribute is None or isinstance(attribute, (int, str, tuple)):
                continue
            if isinstance(attribute, (staticmethod, classmethod)):
                attribute = attribute.__func__
            where = f"{qualified}.{member}"
            if isinstance(attribute, property):
                fget_doc = attribute.fget.__doc__ if attribute.fget else None
                yield where, attribute.__doc__, _signature_line(fget_doc)
            elif callable(attribute) or isinstance(attribute, types.GetSetDescriptorType):
                yield where, attribute.__doc__, _signature_line(attribute.__doc__)
    else:
        yield qualified, value.__doc__, _signature_line(value.__doc__)


def _mpi_without_mpi(monkeypatch):
    """python/clbuf/mpi.py as a build without MPI loads it: the extension without _Mpi*."""
    for name in [n for n in dir(extension) if n.startswith(("_Mpi", "_mpi_"))]:
        monkeypatch.delattr(extension, name)
    spec = importlib.util.spec_from_file_location("clbuf._mpi_without_mpi", clbuf.mpi.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not hasattr(module.Communicator, "send")  # the fallback, not the extension's class
    return module


def _everything(monkeypatch):
    found = list(_documented(clbuf)) + list(_documented(clbuf.mpi))
    # the extension's classes that no __all__ names (what map() returns, pinned_empty()'s base)
    for name, value in vars(extension).items():
        if inspect.isclass(value) and not issubclass(value, BaseException):
            found += _documented_object(f"clbuf._clbuf.{name}", value)
    fallback = _mpi_without_mpi(monkeypatch)
    found += [(f"(without MPI) {name}", doc, signature)
              for name, doc, signature in _documented(fallback)]
    return found


def test_every_public_class_function_method_and_property_says_what_it_is(monkeypatch):
    everything = _everything(monkeypatch)
    assert len(everything) > 150, len(everything)  # MappedArray's numpy methods included
    missing = [name for name, doc, _ in everything if not _says_something(doc)]
    assert missing == []


def test_no_signature_shows_a_cpp_or_pybind11_type(monkeypatch):
    signatures = [(name, signature) for name, _, signature in _everything(monkeypatch)
                  if signature is not None]
    assert len(signatures) > 60, len(signatures)
    bad = re.compile(r"(:|->)\s*(handle|object)\b|::|\bstd\b|pybind11|_clbuf")
    unnamed = re.compile(r"\barg\d+\b")
    for name, signature in signatures:
        assert not bad.search(signature), (name, signature)
        if not signature.startswith("("):  # a property's getter is (arg0: Class) -> ...
            assert not unnamed.search(signature), (name, signature)


# ---- help() against the stubs ---------------------------------------------------------------

def _split(text):
    """Splits at the commas outside brackets and parentheses."""
    parts, depth, current = [], 0, ""
    for c in text:
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += c
    if current.strip():
        parts.append(current.strip())
    return parts


def _runtime_parameters(signature):
    """[(name, type, default text or None, keyword only)] and the result of a pybind11
    signature, `self` left out."""
    _, params, result = SIGNATURE.match(signature).groups()
    out, keyword_only = [], False
    for param in _split(params):
        if param == "*":
            keyword_only = True
            continue
        if param.startswith("*"):
            out.append((param, None, None, keyword_only))
            continue
        name, _, rest = param.partition(": ")
        annotation, _, default = rest.partition(" = ")
        out.append((name, annotation, default or None, keyword_only))
    if out and out[0][0] in ("self", "arg0"):
        out = out[1:]
    return out, result


def _stub_parameters(node):
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = [(a.arg, a.annotation, d, False) for a, d in zip(positional, defaults)]
    if args.vararg:
        out.append(("*" + args.vararg.arg, None, None, False))
    out += [(a.arg, a.annotation, d, True) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if out and out[0][0] == "self":
        out = out[1:]
    return out


STUB_CLASSES = {n.name: n for n in STUB.body if isinstance(n, ast.ClassDef)}
STUB_FUNCTIONS = {n.name: n for n in STUB.body if isinstance(n, ast.FunctionDef)}
ALIASES = {n.targets[0].id: ast.unparse(n.value) for n in STUB.body
           if isinstance(n, ast.Assign) and n.targets[0].id.startswith("_")}


def _collapse(text):
    text = re.sub(r"Union\[Any(,Any)+\]", "Any", text)
    return text.replace("'", "").replace('"', "")


def _normal_stub(annotation):
    text = ast.unparse(annotation)
    for _ in range(3):  # aliases of aliases
        for alias, value in ALIASES.items():
            text = re.sub(rf"\b{alias}\b", value, text)
    text = re.sub(r"(?<![\w.])npt\.", "numpy.typing.", text)
    text = re.sub(r"(?<![\w.])np\.", "numpy.", text)
    return _collapse(text.replace(" ", ""))


def _shown_names():
    """Each stubbed class as help() names it (module.qualname) -> its name in the stub."""
    shown = {}
    for name in STUB_CLASSES:
        cls = getattr(extension, name, None)
        if cls is not None:
            shown[f"{cls.__module__}.{cls.__qualname__}"] = name
    return dict(sorted(shown.items(), key=lambda item: -len(item[0])))


SHOWN = _shown_names()


def _normal_runtime(text):
    for qualified, name in SHOWN.items():
        text = re.sub(rf"(?<![\w.]){re.escape(qualified)}(?![\w.])", name, text)
    text = re.sub(r"(?<![\w.])(pyopencl|mpi4py)(\.\w+)+", "Any", text)
    text = re.sub(r"(?<![\w.])clbuf\.(mpi\.)?", "", text)
    return _collapse(text.replace(" ", ""))


def _stubbed_callables():
    """(label, stub FunctionDef, runtime object) of every stubbed function, method and property
    the extension has (clbuf.mpi's only where it was built with MPI)."""
    for name, node in STUB_FUNCTIONS.items():
        if hasattr(extension, name):
            yield name, node, getattr(extension, name)
    for class_name, cls_node in STUB_CLASSES.items():
        cls = getattr(extension, class_name, None)
        if cls is None:
            continue
        for node in cls_node.body:
            if isinstance(node, ast.FunctionDef):
                yield f"{class_name}.{node.name}", node, inspect.getattr_static(cls, node.name)


STUBBED = list(_stubbed_callables())


@pytest.mark.parametrize("label,node,runtime", STUBBED, ids=[s[0] for s in STUBBED])
def test_help_shows_the_signature_of_the_stub(label, node, runtime):
    if isinstance(runtime, property):
        doc = runtime.fget.__doc__
    elif isinstance(runtime, staticmethod):
        doc = runtime.__func__.__doc__
    else:
        doc = runtime.__doc__
    signature = _signature_line(doc)
    assert signature, (label, doc)
    shown, result = _runtime_parameters(signature)
    stubbed = _stub_parameters(node)
    assert [p[0] for p in shown] == [p[0] for p in stubbed], (label, signature)
    for (name, annotation, default, keyword_only), (_, stub_annotation, stub_default,
                                                     stub_keyword_only) in zip(shown, stubbed):
        where = (label, name, signature)
        assert keyword_only == stub_keyword_only, where
        assert (default is None) == (stub_default is None), where
        if isinstance(stub_default, ast.Constant) and stub_default.value is not Ellipsis:
            assert default == repr(stub_default.value), where
        if name.startswith("*"):
            continue
        assert stub_annotation is not None, where
        assert _normal_runtime(annotation) == _normal_stub(stub_annotation), where
    assert node.returns is not None, label
    assert _normal_runtime(result) == _normal_stub(node.returns), (label, signature)


def test_help_of_copy_device_buffer_reads_as_the_stub():
    assert clbuf.BufferManager.copy_device_buffer.__doc__.splitlines()[0] == (
        "copy_device_buffer(self: clbuf.BufferManager, source_buffer: clbuf.DeviceBuffer, "
        "dest_buffer: clbuf.DeviceBuffer, size_bytes: int, src_offset: int = 0, "
        "dst_offset: int = 0) -> None")
