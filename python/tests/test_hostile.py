# SPDX-License-Identifier: MIT
"""Hostile Python (issue 9, findings 10-12 and the review after them): nothing a pure-Python
caller does may crash, hang or abort the process; every failure is a Python exception with a
message that says what is wrong. Whatever might crash runs in a subprocess with a timeout, so a
crash fails the test instead of killing pytest."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import clbuf

CL_SUCCESS = 0
CL_INVALID_VALUE = -30
CL_INVALID_MEM_OBJECT = -38

# numpy's limit on an array's dimensions (NPY_MAXDIMS): 32 before numpy 2.0, 64 from it.
NUMPY_MAX_DIMS = 64 if int(np.__version__.split(".")[0]) >= 2 else 32


def run_python(source, timeout=60):
    """Runs `source` in a fresh interpreter with this one's sys.path (the module under test)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def describe(result):
    return f"return code {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def raises_clbuf_error(call, code, *fragments):
    with pytest.raises(clbuf.Error) as info:
        call()
    assert info.value.code == code, str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    return info.value


# ---- finding 10: objects made by __new__ without __init__ ---------------------------------

# Every public method and property of each class, called on an object made by cls.__new__(cls)
# with no __init__. The script lists the class's attributes itself (dir()), so a method added
# later is called too; ARGS gives the arguments of those that take some. Each call prints one
# JSON line before and one after, so a crash shows which call it was.
UNINITIALISED_SCRIPT = r"""
import inspect, json, sys
import numpy as np
import clbuf

name = sys.argv[1]
cls = getattr(clbuf, name)
obj = cls.__new__(cls)
ARGS = {
    "upload_to_device": (np.zeros(4, np.float32),),
    "upload_async": (np.zeros(4, np.float32),),
    "download_from_device": (None,),
    "download_async": (None,),
    "copy_device_buffer": (None, None, 0),
    "__exit__": (None, None, None),
    "__getitem__": ("name",),
    "adopt": (None,),
    "empty": ((4,), np.float32),
    "pinned_empty": ((4,), np.float32),
    "map": (None,),
    "fill": (None, 0),
    "fill_async": (None, 0),
    "upload_into": (None, np.zeros(4, np.float32)),
    "upload_into_async": (None, np.zeros(4, np.float32)),
    "copy_async": (None, None, 0),
    "upload_rect": (None, np.zeros(4, np.float32), None),
    "download_rect": (None, np.zeros(4, np.float32), None),
    "copy_rect": (None, None, None),
}
if name in ("BufferManager", "Future", "DeviceBuffer", "DeviceInfo"):
    # a real DeviceBuffer for the manager's methods, so that only `self` is wrong
    real = clbuf.BufferManager()
    buffer = real.upload_to_device(np.zeros(4, np.float32))
    ARGS["download_from_device"] = (buffer,)
    ARGS["download_async"] = (buffer,)
    ARGS["copy_device_buffer"] = (buffer, buffer, 0)
    for method in ("map", "fill", "fill_async"):
        ARGS[method] = (buffer,) + ARGS[method][1:]
    ARGS["copy_async"] = (buffer, buffer, 0)
# static methods (BufferManager.from_pyopencl) have no `self` to be uninitialised
names = sorted(n for n in dir(cls) if not n.startswith("_")
               and not isinstance(inspect.getattr_static(cls, n), staticmethod))
names += [n for n in ("__enter__", "__exit__", "__len__", "__getitem__") if hasattr(cls, n)]
for attribute in names:
    print(json.dumps({"start": attribute}), flush=True)
    outcome = {"name": attribute}
    try:
        value = getattr(obj, attribute)
        if callable(value):
            value = value(*ARGS.get(attribute, ()))
        outcome["returned"] = repr(value)
    except BaseException as error:
        outcome["type"] = type(error).__name__
        outcome["message"] = str(error)
        outcome["code"] = getattr(error, "code", None)
        outcome["is_clbuf_error"] = isinstance(error, clbuf.Error)
    print(json.dumps(outcome), flush=True)
print(json.dumps({"repr": repr(obj)}), flush=True)
del obj
print(json.dumps({"done": True}), flush=True)
"""


@pytest.mark.parametrize("class_name", ["BufferManager", "Future", "DeviceBuffer", "DeviceInfo"])
def test_every_method_of_an_uninitialised_object_raises(bm, class_name):
    """Finding 10: `cls.__new__(cls)` leaves pybind11 without a C++ object. Every method then
    raises clbuf.Error (code 0) saying so, instead of crashing, hanging or reading freed
    memory."""
    try:
        result = run_python(UNINITIALISED_SCRIPT.replace("sys.argv[1]", repr(class_name)),
                            timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"clbuf.{class_name}: a method of an uninitialised object hung")
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0 and lines and lines[-1] == {"done": True}, (
        f"crashed during {lines[-1] if lines else 'import'}\n{describe(result)}")
    outcomes = [line for line in lines if "name" in line]
    assert len(outcomes) >= 3, outcomes
    for outcome in outcomes:
        assert outcome.get("is_clbuf_error"), outcome
        assert outcome["code"] == CL_SUCCESS, outcome
        # "<operation>: <details>" (code 0 has no CL name), the operation the user called
        operation = outcome["name"] if class_name in ("BufferManager", "DeviceBuffer") \
            else f"{class_name}.{outcome['name']}"
        assert outcome["message"].startswith(f"{operation}: this clbuf."), outcome
        assert f"clbuf.{class_name}" in outcome["message"], outcome
        assert "never initialised" in outcome["message"], outcome
    # repr() never raises: it says what the object is
    reprs = [line["repr"] for line in lines if "repr" in line]
    assert reprs and f"clbuf.{class_name}" in reprs[0]


def test_uninitialised_device_buffer_as_an_argument(bm):
    raw = clbuf.DeviceBuffer.__new__(clbuf.DeviceBuffer)
    real = bm.upload_to_device(np.zeros(4, np.float32))
    calls = [
        lambda: bm.download_from_device(raw),
        lambda: bm.download_async(raw),
        lambda: bm.copy_device_buffer(raw, real, 0),
        lambda: bm.copy_device_buffer(real, raw, 0),
    ]
    for call in calls:
        raises_clbuf_error(call, CL_INVALID_MEM_OBJECT, "uninitialised clbuf.DeviceBuffer")


def test_init_after_new_makes_a_working_manager(bm):
    manager = clbuf.BufferManager.__new__(clbuf.BufferManager)
    manager.__init__()
    data = np.arange(10, dtype=np.int32)
    np.testing.assert_array_equal(manager.download_from_device(manager.upload_to_device(data)),
                                  data)
    manager.cleanup()


# ---- finding 11: clear errors for shapes numpy cannot make, and for selectors --------------

@pytest.mark.parametrize("method", ["download_from_device", "download_async"])
def test_shape_beyond_numpy_dimensions_is_rejected_up_front(new_manager, method):
    bm = new_manager()
    handle = bm.upload_to_device(np.zeros(1, np.float64))
    dims = NUMPY_MAX_DIMS + 1
    bm.reset_stats()
    error = raises_clbuf_error(lambda: getattr(bm, method)(handle, (1,) * dims, np.float64),
                               CL_INVALID_VALUE, method, f"{dims} dimensions",
                               f"at most {NUMPY_MAX_DIMS}", "(1, 1, 1")
    assert "shape" in str(error)
    assert bm.stats()["download"]["operations"] == 0  # nothing reached the device
    # the limit itself is fine
    result = getattr(bm, method)(handle, (1,) * NUMPY_MAX_DIMS, np.float64)
    if method == "download_async":
        result = result.get()
    assert result.shape == (1,) * NUMPY_MAX_DIMS


def test_shape_sequence_with_a_huge_len_fails_fast(bm):
    class Endless:
        def __len__(self):
            return 10**12

        def __getitem__(self, index):
            return 1

    handle = bm.upload_to_device(np.zeros(1, np.float64))
    raises_clbuf_error(lambda: bm.download_from_device(handle, Endless()), CL_INVALID_VALUE,
                       "1000000000000 dimensions", f"at most {NUMPY_MAX_DIMS}")


@pytest.mark.parametrize("selector,type_name", [
    (5, "int"), (1.5, "float"), (b"cpu", "bytes"), (["cpu"], "list"), (object(), "object"),
], ids=repr)
def test_selector_must_be_a_str_or_none(bm, selector, type_name):
    raises_clbuf_error(lambda: clbuf.BufferManager(selector), CL_INVALID_VALUE, "BufferManager",
                       f"selector must be a str or None, not {type_name}")
    raises_clbuf_error(lambda: clbuf.BufferManager(selector=selector), CL_INVALID_VALUE,
                       f"not {type_name}")


@pytest.mark.parametrize("selector", ["\ud800", "cpu\udcff"], ids=ascii)
def test_selector_that_is_not_valid_utf8(bm, selector):
    raises_clbuf_error(lambda: clbuf.BufferManager(selector), CL_INVALID_VALUE, "BufferManager",
                       ascii(selector), "not valid UTF-8", "surrogates not allowed")


def test_selector_none_and_str_keep_their_meaning(bm):
    device = bm.device
    for manager in (clbuf.BufferManager(None), clbuf.BufferManager(selector=None),
                    clbuf.BufferManager(f"{device.platform_index}:{device.device_index}"),
                    clbuf.BufferManager(device.type)):
        assert manager.device.name == device.name
        manager.cleanup()


# ---- finding 12: daemon threads still transferring when the interpreter exits -------------

DAEMON_SCRIPT = r"""
import atexit, sys, threading, time
import numpy as np
import clbuf

shared = clbuf.BufferManager()
data = np.arange(1 << 14, dtype=np.float32)
strided = np.arange(1 << 15, dtype=np.float32)[::2]
big = np.ones(1 << 22, dtype=np.uint8)

def transfers(bm):
    while True:
        handle = bm.upload_to_device(data)
        bm.download_from_device(handle)
        bm.download_async(handle).get()
        other = bm.upload_async(strided).get()
        bm.copy_device_buffer(handle, other, 64)
        bm.download_async(other)  # dropped at once: its destructor waits without the GIL

def on_shared():
    started.wait()
    transfers(shared)

def on_its_own():
    started.wait()
    transfers(clbuf.BufferManager())

def making_managers():
    started.wait()
    while True:
        with clbuf.BufferManager() as bm:
            bm.upload_to_device(data)

def waiting_on_big_transfers():
    started.wait()
    handle = shared.upload_to_device(big)
    while True:
        shared.download_async(handle).wait()

def finishing():
    # a non-daemon thread: Python joins it before exiting, and its transfers must all work
    bm = clbuf.BufferManager()
    for _ in range(50):
        assert bm.download_from_device(bm.upload_to_device(data)).tobytes() == data.tobytes()
    print("non-daemon thread done", flush=True)

targets = [on_shared] * 3 + [on_its_own] * 2 + [making_managers, waiting_on_big_transfers] * 2
started = threading.Barrier(len(targets) + 1)  # the daemon threads and the main thread
for target in targets:
    threading.Thread(target=target, daemon=True).start()
threading.Thread(target=finishing).start()
if "cleanup-at-exit" in sys.argv:
    atexit.register(shared.cleanup)  # runs while the daemon threads still transfer
started.wait()
time.sleep(float(sys.argv[1]))
print("main thread exits", flush=True)
"""


@pytest.mark.parametrize("variant", ["", "cleanup-at-exit"], ids=["plain", "cleanup_at_exit"])
def test_exit_while_daemon_threads_transfer(bm, variant):
    """Finding 12: the main thread returns while daemon threads are inside transfers (with the
    GIL released), on a shared manager and on their own. The interpreter must exit with 0,
    never abort in the GIL guard ("terminate called without an active exception")."""
    for attempt, pause in enumerate((0.0, 0.05, 0.15, 0.3)):
        source = DAEMON_SCRIPT.replace("sys.argv[1]", repr(pause)).replace(
            '"cleanup-at-exit" in sys.argv', repr(variant == "cleanup-at-exit"))
        try:
            result = run_python(source, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"attempt {attempt} (pause {pause} s): the interpreter hung at exit")
        assert result.returncode == 0, f"attempt {attempt} (pause {pause} s)\n{describe(result)}"
        assert "terminate" not in result.stderr, describe(result)
        assert "main thread exits" in result.stdout, describe(result)
        assert "non-daemon thread done" in result.stdout, describe(result)


# ---- the rest of the review ----------------------------------------------------------------

def test_shape_may_be_a_0d_integer_array(bm):
    data = np.arange(6, dtype=np.int16)
    handle = bm.upload_to_device(data)
    np.testing.assert_array_equal(bm.download_from_device(handle, np.array(6)), data)
    np.testing.assert_array_equal(bm.download_from_device(handle, np.array([2, 3])),
                                  data.reshape(2, 3))


@pytest.mark.parametrize("shape", [(0, 2**62, 2**62), (2**40, 2**40, 0)], ids=str)
def test_empty_shape_whose_other_extents_overflow(bm, shape):
    """numpy refuses these (its size check skips zero extents); so does clbuf, with a
    clbuf.Error like any other shape that does not fit."""
    handle = bm.upload_to_device(np.zeros(0, np.float32))
    raises_clbuf_error(lambda: bm.download_from_device(handle, shape, np.float32),
                       CL_INVALID_VALUE, "more bytes than fit in memory")


def test_shape_without_a_len(bm):
    class NoLen:
        def __getitem__(self, index):
            return 1

    handle = bm.upload_to_device(np.zeros(1, np.float32))
    raises_clbuf_error(lambda: bm.download_from_device(handle, NoLen()), CL_INVALID_VALUE,
                       "shape must be an int or a sequence of ints", "NoLen")


def test_exceptions_raised_by_the_callers_own_code_propagate(bm):
    """An __index__ or __getitem__ of the caller's that raises is the caller's error: it
    propagates as it would from any Python function (a TypeError still means 'not an int')."""
    class Broken:
        def __index__(self):
            raise ZeroDivisionError("from __index__")

    class BadItems:
        def __len__(self):
            return 2

        def __getitem__(self, index):
            raise KeyError(index)

    handle = bm.upload_to_device(np.zeros(4, np.uint8))
    with pytest.raises(ZeroDivisionError, match="from __index__"):
        bm.copy_device_buffer(handle, handle, Broken())
    with pytest.raises(KeyError):
        bm.download_from_device(handle, BadItems())
    raises_clbuf_error(lambda: bm.copy_device_buffer(handle, handle, np.array([1, 2])),
                       CL_INVALID_VALUE, "size_bytes must be an integer, not ndarray")


def test_type_names_in_messages_do_not_run_python_code(bm):
    class Meta(type):
        def __getattribute__(cls, name):
            if name == "__name__":
                raise KeyError("__name__ looked up")
            return type.__getattribute__(cls, name)

    class Odd(metaclass=Meta):
        pass

    raises_clbuf_error(lambda: bm.upload_to_device(Odd()), CL_INVALID_VALUE,
                       "data must be a numpy.ndarray or an object with the buffer protocol",
                       "not Odd")


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_non_contiguous_subclass_input_is_uploaded_as_plain_bytes(bm):
    data = np.ma.masked_array(np.arange(20, dtype=np.int32), mask=[0, 1] * 10)[::2]
    handle = bm.upload_to_device(data)
    np.testing.assert_array_equal(bm.download_from_device(handle), np.arange(0, 20, 2))
    matrix = np.matrix(np.arange(12, dtype=np.float64).reshape(3, 4))[:, ::-1]
    result = bm.download_from_device(bm.upload_to_device(matrix))
    assert type(result) is np.ndarray
    np.testing.assert_array_equal(result, np.asarray(matrix))


def test_device_info_getitem_is_a_mapping_of_its_fields(bm):
    info = bm.device
    for key in ("name", "platform", "type", "global_mem_bytes", "max_alloc_bytes",
                "platform_index", "device_index"):
        assert info[key] == getattr(info, key)
    for key in ("nope", "__class__", "__init__", 0, None):
        with pytest.raises(KeyError):
            info[key]


# ---- the hostile review of 2026-12-05 -------------------------------------------------------

CL_OUT_OF_HOST_MEMORY = -6
CL_INVALID_OPERATION = -59


def test_host_memory_numpy_cannot_allocate_is_a_clbuf_error(bm):
    # A zero-stride view of 2**50 elements must be made contiguous first: numpy's MemoryError
    # becomes CL_OUT_OF_HOST_MEMORY, like every allocation clbuf makes.
    huge = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(2**50,), strides=(0,))
    for call in (bm.upload_to_device, bm.upload_async):
        raises_clbuf_error(lambda: call(huge), CL_OUT_OF_HOST_MEMORY,
                           "numpy could not allocate a contiguous copy", "MemoryError")


def test_a_closed_mapping_refuses_every_use_through_the_array_and_clbufs_calls(bm):
    buf = bm.upload_to_device(np.arange(6, dtype=np.float32))
    other = bm.upload_to_device(np.full(6, -1, np.float32))
    with bm.map(buf, "rw") as a:
        assert a.flat[2] == 2 and a.argmax() == 5
    uses = {
        "a.flat[0]": lambda: a.flat[0],
        "a.argmax()": lambda: a.argmax(),
        "a.flat = 42": lambda: setattr(a, "flat", 42.0),
        "a.T": lambda: a.T,
        "a.real": lambda: a.real,
        "a.ctypes": lambda: a.ctypes,
        "a.sum()": lambda: a.sum(),
        "a.tobytes()": lambda: a.tobytes(),
        "download_from_device(out=a)": lambda: bm.download_from_device(other, out=a),
        "upload_to_device(a)": lambda: bm.upload_to_device(a),
        "upload_into(buf, a)": lambda: bm.upload_into(other, a),
        "download_async(out=a)": lambda: bm.download_async(other, out=a),
    }
    for name, use in uses.items():
        with pytest.raises(clbuf.Error) as info:
            use()
        assert info.value.code == CL_INVALID_OPERATION, (name, str(info.value))
    assert a.shape == (6,) and a.dtype == np.float32  # metadata reads no element
    assert np.array_equal(bm.download_from_device(buf), np.arange(6, dtype=np.float32))


def test_a_buffer_works_with_another_manager_of_its_context_after_cleanup_of_its_own():
    cl = pytest.importorskip("pyopencl")
    try:
        context = cl.Context([cl.get_platforms()[0].get_devices()[0]])
    except cl.Error as error:
        pytest.skip(f"no OpenCL device for pyopencl: {error}")
    queue = cl.CommandQueue(context)
    a = clbuf.BufferManager.from_pyopencl(queue)
    b = clbuf.BufferManager.from_pyopencl(queue)
    buf = a.upload_to_device(np.arange(8, dtype=np.float32))
    with b.map(buf, "r") as mapped:  # while `a` lives: any manager of the context maps
        assert np.array_equal(np.asarray(mapped), np.arange(8, dtype=np.float32))
    a.cleanup()
    b.fill_async(buf, 3).get()  # a wide dtype's fill: its typed alias is made by `b`
    assert np.array_equal(b.download_from_device(buf), np.full(8, 3, np.float32))
    with b.map(buf, "rw") as mapped:
        mapped[1] = 9
    assert b.download_from_device(buf)[1] == 9
    # Slicing makes a view with the manager that made the buffer: after its cleanup(), an error.
    raises_clbuf_error(lambda: buf[2:4], CL_SUCCESS, "view", "cleanup()")
    b.cleanup()


def test_zero_sized_calls_after_cleanup_raise_like_any_other(new_manager):
    bm = new_manager()
    empty32 = bm.empty(0, np.float32)
    empty8 = bm.empty(0, np.uint8)
    bm.cleanup()
    calls = {
        "fill f32": lambda: bm.fill(empty32, 1),
        "fill_async f32": lambda: bm.fill_async(empty32, 1).get(),
        "map f32": lambda: bm.map(empty32).__enter__(),
        "fill u8": lambda: bm.fill(empty8, 1),
        "download": lambda: bm.download_from_device(empty32),
    }
    for name, call in calls.items():
        with pytest.raises(clbuf.Error) as info:
            call()
        assert info.value.code == CL_SUCCESS and "cleanup()" in str(info.value), name


def test_fill_refuses_integers_the_dtype_cannot_hold_and_none(bm):
    cases = ((np.int8, 300), (np.int8, -129), (np.uint32, -1), (np.uint32, 2**32),
             (np.uint64, 2**64), (np.float32, None), (np.int32, None))
    for dtype, value in cases:
        buf = bm.upload_to_device(np.arange(3, dtype=dtype))
        for fill in (lambda: bm.fill(buf, value), lambda: bm.fill_async(buf, value).get()):
            raises_clbuf_error(fill, CL_INVALID_VALUE, "value")
        np.testing.assert_array_equal(bm.download_from_device(buf), np.arange(3))
    buf = bm.upload_to_device(np.zeros(3, np.int8))
    bm.fill(buf, -128)  # the bounds themselves are fine, and so are numpy's own integers
    bm.fill(buf, np.int64(127))
    np.testing.assert_array_equal(bm.download_from_device(buf), [127, 127, 127])
