# SPDX-License-Identifier: MIT
"""A value meets a dtype (issue 35): fill and fill_async store the value itself or raise
clbuf.Error (CL_INVALID_VALUE) and change nothing. Never truncated (1.7 into int32), wrapped
(300.0 into int8, -1.0 into uint8) or made inf (1e39 into float32).

Every pair of a value's type (Python's bool, int, float, complex and numpy's scalars) and a
buffer dtype, at the edges: nan, inf, -0.0, 2**53 + 1, one past each integer dtype's range, and
the extremes that must still work (uint64 2**63 and 2**64 - 1, int64 -2**63). The oracle below
states the rule in exact arithmetic (fractions):
- bool and integer dtypes take a whole number in range: a bool, an int, or a float or complex
  whose value is one (2.0, -0.0, 3+0j);
- float and complex dtypes take any float that rounds to a finite element (nan and inf too),
  and an int only where the dtype holds it exactly;
- a complex with an imaginary part other than 0 goes into complex dtypes only."""
import math
import re
import warnings
from fractions import Fraction

import numpy as np
import pytest

import clbuf

CL_INVALID_VALUE = -30
RNG = np.random.default_rng(35)

BUFFER_DTYPES = [np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128)]
INTEGER_DTYPES = [d for d in BUFFER_DTYPES if d.kind in "iu"]

INTS = sorted({0, 1, -1, 2, 2049, 2**24 + 1, 2**53, 2**53 + 1, 2**63, 2**64 - 1, 2**64, -2**63,
               -2**63 - 1, 10**400}
              | {e for d in INTEGER_DTYPES for b in (np.iinfo(d).min, np.iinfo(d).max)
                 for e in (b - 1, b, b + 1)})
FLOATS = [math.nan, math.inf, -math.inf, -0.0, 0.5, 1.7, -1.0, 2.0, 127.0, 127.5, 128.0, -129.0,
          255.0, 256.0, 300.0, 2049.0, 65519.0, 65520.0, 3.4e38, 1e39, 2.0**53, 2.0**63,
          -2.0**63, 2.0**64, -2.0**64, 1.7e308]
COMPLEXES = [3 + 0j, 3 + 1j, complex(-0.0, 0.0), complex(1.5, 0), complex(math.nan, 0),
             complex(0, math.nan), complex(1e39, 0), complex(0, 1e39), complex(2.0**63, 0)]


def _numpy_values(scalar, values):
    """`values` as numpy's `scalar` type, each once, where the type holds it (ints) or as numpy
    rounds it (floats)."""
    out = {}
    for value in values:
        if issubclass(scalar, np.integer):
            info = np.iinfo(scalar)
            if not info.min <= value <= info.max:
                continue
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = scalar(value)
        out.setdefault(converted.tobytes(), converted)
    return list(out.values())


VALUES = {
    "bool": [True, False],
    "int": INTS,
    "float": FLOATS,
    "complex": COMPLEXES,
    "numpy.bool_": [np.True_, np.False_],
    **{f"numpy.{t.__name__}": _numpy_values(t, INTS) for t in (
        np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)},
    **{f"numpy.{t.__name__}": _numpy_values(t, FLOATS) for t in (
        np.float16, np.float32, np.float64)},
    **{f"numpy.{t.__name__}": _numpy_values(t, COMPLEXES) for t in (
        np.complex64, np.complex128)},
}


def _exact(x):
    """A real number as a Fraction, or nan/inf as a float."""
    if isinstance(x, (bool, np.bool_, int, np.integer)):
        return Fraction(int(x))
    x = float(x)  # exact: float16, float32 and float64 are all doubles
    return Fraction(x) if math.isfinite(x) else x


def expected(value, dtype):
    """The element `value` must become in a buffer of `dtype`, or None where it must be refused."""
    is_complex = isinstance(value, (complex, np.complexfloating))
    real = _exact(value.real if is_complex else value)
    imag = _exact(value.imag) if is_complex else Fraction(0)
    if dtype.kind in "biu":
        if imag != 0 or not isinstance(real, Fraction) or real.denominator != 1:
            return None
        whole = int(real)
        if dtype.kind == "b":
            return np.array(bool(whole), dtype) if whole in (0, 1) else None
        info = np.iinfo(dtype)
        return np.array(whole, dtype) if info.min <= whole <= info.max else None
    part = dtype if dtype.kind == "f" else np.dtype(f"f{dtype.itemsize // 2}")
    from_int = isinstance(value, (bool, np.bool_, int, np.integer))

    def holds(exact):
        if not isinstance(exact, Fraction):
            return True  # nan and inf stay themselves
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                element = np.array(int(exact) if from_int else float(exact), part)[()]
            except OverflowError:
                return False
        return bool(np.isfinite(element)) and (not from_int or Fraction(float(element)) == exact)

    if dtype.kind == "f":
        if imag != 0 or not holds(real):
            return None
        source = value.real if is_complex else value
        return np.array(int(source) if from_int else source, dtype)
    if not (holds(real) and holds(imag)):
        return None
    return np.array(int(value) if from_int else value, dtype)


def random_bytes(dtype, count=3):
    return RNG.integers(1, 256, count * dtype.itemsize, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("dtype", BUFFER_DTYPES, ids=str)
@pytest.mark.parametrize("kind", list(VALUES), ids=str)
def test_every_value_is_stored_exactly_or_refused(bm, kind, dtype):
    before = random_bytes(dtype)
    buf = bm.upload_to_device(np.frombuffer(before, dtype))
    for value in VALUES[kind]:
        element = expected(value, dtype)
        for name, fill in (("fill", lambda: bm.fill(buf, value)),
                           ("fill_async", lambda: bm.fill_async(buf, value).get())):
            if element is None:
                with pytest.raises(clbuf.Error) as info:
                    fill()
                message = str(info.value)
                assert info.value.code == CL_INVALID_VALUE, message
                assert message.startswith(f"{name}: CL_INVALID_VALUE (-30): value "), message
                assert bm.download_from_device(buf).tobytes() == before, (name, value)
            else:
                fill()
                got = bm.download_from_device(buf).tobytes()
                assert got == element.tobytes() * 3, (name, value, dtype, got)
                bm.upload_into(buf, np.frombuffer(before, dtype))  # the random bytes again


# The cases of the issue, and what must keep working, by name.
REFUSED = [
    (np.int8, 300.0, "out of the range of int8 [-128, 127]"),
    (np.uint8, -1.0, "out of the range of uint8 [0, 255]"),
    (np.int32, 1.7, "is not a whole number; int32 holds whole numbers only"),
    (np.int32, math.nan, "is not a whole number"),
    (np.int64, math.inf, "is not a whole number"),
    (np.int64, 2.0**63, "out of the range of int64"),
    (np.uint64, 2.0**64, "out of the range of uint64"),
    (np.uint64, -1, "out of the range of uint64"),
    (np.int8, 300, "out of the range of int8"),
    (np.int64, np.uint64(2**63), "out of the range of int64"),
    (np.int64, 1e30, "out of the range of int64"),
    (np.bool_, 2, "is not 0 or 1"),
    (np.int32, 3 + 1j, "has an imaginary part; int32 holds real numbers only"),
    (np.float64, 1 + 1j, "has an imaginary part"),
    (np.float64, 2**53 + 1, "not exactly representable in float64 (it would be 9007199254740992.0)"),
    (np.float32, 2**24 + 1, "not exactly representable in float32"),
    (np.float32, 1e39, "out of the range of float32 (largest 3.4028235e+38; it would be inf)"),
    (np.float16, 65520.0, "out of the range of float16"),
    (np.float64, 10**400, "out of the range of float64"),
    (np.int32, "3", "(str) cannot be cast to int32"),
    (np.int32, None, "must be a number, not None"),
    (np.int32, [1], "must be a single value, not a list"),
    (np.int32, np.array([1]), "must be a single value, not of shape (1,)"),
]
STORED = [
    (np.uint64, 2**63, 2**63),
    (np.uint64, 2**64 - 1, 2**64 - 1),
    (np.uint64, 2.0**63, 2**63),
    (np.int64, -2**63, -2**63),
    (np.int64, -2.0**63, -2**63),
    (np.int64, 2**53 + 1, 2**53 + 1),
    (np.int32, 2.0, 2),
    (np.int32, -0.0, 0),
    (np.int32, 3 + 0j, 3),
    (np.int8, np.float32(-128.0), -128),
    (np.int8, np.array(127), 127),
    (np.bool_, 1.0, True),
    (np.float64, 2**53, 2.0**53),
    (np.float32, 0.1, np.float32(0.1)),
    (np.float32, math.nan, np.float32(math.nan)),
    (np.float16, 65519.0, np.float16(65504.0)),
    (np.complex64, 1 + 2j, 1 + 2j),
]


def _id(param):
    return np.dtype(param).name if isinstance(param, type) else repr(param)


@pytest.mark.parametrize("dtype,value,fragment", REFUSED, ids=_id)
def test_refused_values_name_the_value_and_the_dtype(bm, dtype, value, fragment):
    before = np.frombuffer(random_bytes(np.dtype(dtype)), dtype)
    buf = bm.upload_to_device(before)
    for name, fill in (("fill", lambda: bm.fill(buf, value)),
                       ("fill_async", lambda: bm.fill_async(buf, value).get())):
        with pytest.raises(clbuf.Error) as info:
            fill()
        assert info.value.code == CL_INVALID_VALUE
        assert str(info.value).startswith(f"{name}: CL_INVALID_VALUE (-30): value "), info.value
        assert fragment in str(info.value), str(info.value)
        assert bm.download_from_device(buf).tobytes() == before.tobytes()


@pytest.mark.parametrize("dtype,value,element", STORED, ids=_id)
def test_values_the_dtype_holds_are_stored(bm, dtype, value, element):
    buf = bm.upload_to_device(np.frombuffer(random_bytes(np.dtype(dtype)), dtype))
    bm.fill(buf, value)
    assert bm.download_from_device(buf).tobytes() == np.full(3, element, dtype).tobytes()
    bm.upload_into(buf, np.frombuffer(random_bytes(np.dtype(dtype)), dtype))
    bm.fill_async(buf, value).get()
    assert bm.download_from_device(buf).tobytes() == np.full(3, element, dtype).tobytes()


# ---- integers: sizes, offsets, shapes, codes -----------------------------------------------

def test_integer_arguments_take_no_float_not_even_a_whole_one(bm):
    # Every other call that takes a number takes an integer (operator.index): a float, numpy's
    # included, is refused rather than truncated.
    data = np.frombuffer(random_bytes(np.dtype(np.float32), 8), np.float32)
    buf = bm.upload_to_device(data)
    other = bm.upload_to_device(data)
    calls = {
        "error_name": lambda v: clbuf.error_name(v),
        "copy_device_buffer": lambda v: bm.copy_device_buffer(buf, other, v),
        "copy_async": lambda v: bm.copy_async(buf, other, 4, src_offset=v),
        "upload_into": lambda v: bm.upload_into(buf, data[:1], v),
        "empty": lambda v: bm.empty(v, np.float32),
        "download_from_device": lambda v: bm.download_from_device(buf, (v, 4)),
        "pinned_empty": lambda v: bm.pinned_empty((v,), np.uint8),
        "upload_rect": lambda v: bm.upload_rect(buf, data, clbuf.Region(size=(v, 1, 1))),
    }
    for name, call in calls.items():
        for value in (2.0, np.float32(2.0), np.float64(2.0), 2.5):
            with pytest.raises(clbuf.Error) as info:
                call(value)
            assert info.value.code == CL_INVALID_VALUE, (name, value)
            assert str(info.value).startswith(f"{name}: CL_INVALID_VALUE (-30): "), info.value
            assert re.search(r"must be an (integer|int)", str(info.value)), info.value
    assert bm.download_from_device(other).tobytes() == data.tobytes()
    assert clbuf.error_name(np.int16(-30)) == "CL_INVALID_VALUE"
