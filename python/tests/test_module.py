# SPDX-License-Identifier: MIT
"""The clbuf module beyond the seed: dtypes, shapes, layouts, bad input, async, threads."""
import threading

import numpy as np
import pytest

import clbuf

RNG = np.random.default_rng(1234)

NUMERIC_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128,
]


def random_array(shape, dtype):
    """Random values covering every byte: the array's bytes are random, so floats include
    NaN payloads and infinities, which must come back bit for bit."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    raw = RNG.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def assert_same_bytes(result, expected):
    assert result.dtype == expected.dtype
    assert result.shape == expected.shape
    assert result.tobytes() == np.ascontiguousarray(expected).tobytes()


def expect_error(code, *fragments):
    """pytest.raises for clbuf.Error with this code and message fragments."""
    class Checker:
        def __enter__(self):
            self.raises = pytest.raises(clbuf.Error)
            self.info = self.raises.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.raises.__exit__(*exc)
            error = self.info.value
            assert error.code == code, str(error)
            for fragment in fragments:
                assert fragment in str(error), (fragment, str(error))
            return suppressed
    return Checker()


# ---- dtypes, shapes, layouts -------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_numeric_dtype_round_trips_bit_exactly(bm, dtype):
    data = random_array((257,), dtype)
    handle = bm.upload_to_device(data)
    assert handle.dtype == np.dtype(dtype)
    assert handle.nbytes == data.nbytes
    assert handle.size == 257
    assert_same_bytes(bm.download_from_device(handle, data.shape, data.dtype), data)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 3, 4), (0,), (3, 0, 2)],
                         ids=str)
def test_shapes_round_trip(bm, shape):
    data = random_array(shape, np.float64)
    handle = bm.upload_to_device(data)
    assert handle.shape == shape
    assert handle.nbytes == data.nbytes
    result = bm.download_from_device(handle, shape, np.float64)
    assert_same_bytes(result, data)
    # shape and dtype default to those recorded at upload
    assert_same_bytes(bm.download_from_device(handle), data)


def test_shape_may_be_an_int_a_list_or_numpy_integers(bm):
    data = random_array((12,), np.int32)
    handle = bm.upload_to_device(data)
    assert_same_bytes(bm.download_from_device(handle, 12, np.int32), data)
    assert_same_bytes(bm.download_from_device(handle, [3, 4], "int32"), data.reshape(3, 4))
    assert_same_bytes(bm.download_from_device(handle, (np.int64(2), np.uint8(6)), "i4"),
                      data.reshape(2, 6))


def test_download_may_reinterpret_the_bytes_as_another_dtype_of_equal_size(bm):
    data = random_array((4, 6), np.float32)
    handle = bm.upload_to_device(data)
    result = bm.download_from_device(handle, (12,), np.int64)
    assert result.dtype == np.int64 and result.shape == (12,)
    assert result.tobytes() == data.tobytes()


@pytest.mark.parametrize("make", [
    lambda a: a[::2],
    lambda a: a.reshape(8, 16).T,
    lambda a: np.asfortranarray(a.reshape(8, 16)),
    lambda a: a.reshape(8, 16)[1:7, 3:11:3],
    lambda a: a[::-1],
], ids=["stride2", "transposed", "fortran", "sliced2d", "reversed"])
def test_non_contiguous_input_is_uploaded_in_logical_order(bm, make):
    base = random_array((128,), np.int32)
    view = make(base)
    before = base.copy()
    handle = bm.upload_to_device(view)
    assert handle.shape == view.shape
    assert_same_bytes(bm.download_from_device(handle, view.shape, view.dtype), view)
    np.testing.assert_array_equal(base, before)


def test_misaligned_input(bm):
    raw = bytearray(RNG.integers(0, 256, size=8 * 100 + 1, dtype=np.uint8).tobytes())
    data = np.frombuffer(raw, dtype=np.float64, offset=1)
    assert not data.flags.aligned
    handle = bm.upload_to_device(data)
    assert_same_bytes(bm.download_from_device(handle, data.shape, data.dtype), data)


def test_read_only_and_non_native_byte_order_input(bm):
    data = random_array((50,), np.dtype(">u4"))
    data.flags.writeable = False
    handle = bm.upload_to_device(data)
    assert handle.dtype == np.dtype(">u4")
    result = bm.download_from_device(handle, data.shape, data.dtype)
    assert_same_bytes(result, data)
    assert result.flags.writeable and result.flags.c_contiguous


def test_upload_copies_the_data(bm):
    data = random_array((64,), np.float32)
    expected = data.copy()
    handle = bm.upload_to_device(data)
    data[:] = 0
    assert_same_bytes(bm.download_from_device(handle, (64,), np.float32), expected)


def test_download_returns_a_new_array_each_time(bm):
    handle = bm.upload_to_device(random_array((16,), np.int16))
    first = bm.download_from_device(handle, (16,), np.int16)
    second = bm.download_from_device(handle, (16,), np.int16)
    assert not np.shares_memory(first, second)
    first[:] = 0
    assert second.any() or not first.any()


def test_partial_copy_and_zero_byte_copy(bm):
    src = random_array((100,), np.uint8)
    dst = random_array((200,), np.uint8)
    src_handle = bm.upload_to_device(src)
    dst_handle = bm.upload_to_device(dst)
    bm.copy_device_buffer(src_handle, dst_handle, 60)
    expected = dst.copy()
    expected[:60] = src[:60]
    assert_same_bytes(bm.download_from_device(dst_handle, (200,), np.uint8), expected)
    bm.copy_device_buffer(src_handle, dst_handle, 0)
    assert_same_bytes(bm.download_from_device(dst_handle, (200,), np.uint8), expected)


def test_copy_between_different_dtypes_copies_bytes(bm):
    src = random_array((10,), np.float64)
    dst = np.zeros((20,), np.int32)
    src_handle = bm.upload_to_device(src)
    dst_handle = bm.upload_to_device(dst)
    bm.copy_device_buffer(src_handle, dst_handle, src.nbytes)
    result = bm.download_from_device(dst_handle, (20,), np.int32)
    assert result.tobytes() == src.tobytes()


def test_large_round_trip(bm):
    data = random_array((4 << 20,), np.float32)  # 16 MiB
    handle = bm.upload_to_device(data)
    assert_same_bytes(bm.download_from_device(handle, data.shape, data.dtype), data)


# ---- bad input: clbuf.Error with the OpenCL code, nothing changed --------------------------

CL_SUCCESS = 0
CL_DEVICE_NOT_FOUND = -1
CL_MEM_COPY_OVERLAP = -8
CL_INVALID_VALUE = -30
CL_INVALID_CONTEXT = -34
CL_INVALID_MEM_OBJECT = -38


def test_error_is_a_runtime_error_with_code_and_name():
    assert issubclass(clbuf.Error, RuntimeError)
    error = clbuf.Error("x: CL_INVALID_VALUE (-30): y", -30)
    assert error.code == -30 and error.name == "CL_INVALID_VALUE"
    assert str(error) == "x: CL_INVALID_VALUE (-30): y"
    assert clbuf.error_name(-8) == "CL_MEM_COPY_OVERLAP"
    assert clbuf.error_name(12345) == "CL_UNKNOWN_ERROR"


@pytest.mark.parametrize("shape,dtype", [
    ((999,), np.float32), ((1001,), np.float32), ((1000,), np.float64), ((1000,), np.int16),
    ((10, 10), np.float32), ((), np.float32), ((0,), np.float32),
], ids=str)
def test_shape_or_dtype_not_matching_the_buffer_bytes(bm, shape, dtype):
    data = random_array((1000,), np.float32)
    handle = bm.upload_to_device(data)
    want = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    with expect_error(CL_INVALID_VALUE, "download_from_device", "CL_INVALID_VALUE (-30)",
                      f"holds {want} bytes", "4000 bytes"):
        bm.download_from_device(handle, shape, dtype)
    assert_same_bytes(bm.download_from_device(handle, (1000,), np.float32), data)


@pytest.mark.parametrize("shape", [(-1,), (2, -3), "abc", 2.5, (1.0,), object()], ids=repr)
def test_bad_shape(bm, shape):
    handle = bm.upload_to_device(random_array((4,), np.int32))
    with expect_error(CL_INVALID_VALUE, "download_from_device", "shape"):
        bm.download_from_device(handle, shape, np.int32)


@pytest.mark.parametrize("dtype", ["no-such-type", object, "U4", "S4", "O", "V4",
                                   "datetime64[s]"], ids=str)
def test_bad_or_non_numeric_dtype(bm, dtype):
    handle = bm.upload_to_device(random_array((4,), np.int32))
    with expect_error(CL_INVALID_VALUE, "download_from_device", "dtype"):
        bm.download_from_device(handle, (4,), dtype)


def test_overflowing_shape(bm):
    handle = bm.upload_to_device(random_array((4,), np.int32))
    with expect_error(CL_INVALID_VALUE, "download_from_device"):
        bm.download_from_device(handle, (2**62, 2**62), np.int32)


@pytest.mark.parametrize("data", [[1, 2, 3], (1.0,), "text", 3, None,
                                  np.array(["a", "b"]), np.array([object(), 1], dtype=object),
                                  np.zeros(3, dtype="datetime64[s]")],
                         ids=lambda d: type(d).__name__ + str(getattr(d, "dtype", "")))
def test_upload_rejects_anything_but_a_numeric_ndarray(bm, data):
    with expect_error(CL_INVALID_VALUE, "upload_to_device"):
        bm.upload_to_device(data)
    with expect_error(CL_INVALID_VALUE, "upload_async"):
        bm.upload_async(data)


@pytest.mark.parametrize("not_a_buffer", [None, 0, "buffer", np.zeros(4, np.float32)],
                         ids=lambda v: type(v).__name__)
def test_handles_must_be_device_buffers(bm, not_a_buffer):
    handle = bm.upload_to_device(np.zeros(4, np.float32))
    with expect_error(CL_INVALID_MEM_OBJECT, "download_from_device", "clbuf.DeviceBuffer"):
        bm.download_from_device(not_a_buffer, (4,), np.float32)
    with expect_error(CL_INVALID_MEM_OBJECT, "copy_device_buffer", "source_buffer"):
        bm.copy_device_buffer(not_a_buffer, handle, 4)
    with expect_error(CL_INVALID_MEM_OBJECT, "copy_device_buffer", "dest_buffer"):
        bm.copy_device_buffer(handle, not_a_buffer, 4)
    with expect_error(CL_INVALID_MEM_OBJECT, "download_async"):
        bm.download_async(not_a_buffer)


@pytest.mark.parametrize("size_bytes,fragment", [
    (401, "read of 401 bytes"),     # past the 400-byte source
    (801, "read of 801 bytes"),
], ids=str)
def test_copy_past_the_source(bm, size_bytes, fragment):
    src, dst = random_array((100,), np.float32), random_array((1000,), np.float32)
    src_handle, dst_handle = bm.upload_to_device(src), bm.upload_to_device(dst)
    with expect_error(CL_INVALID_VALUE, "CL_INVALID_VALUE (-30)", fragment, "400-byte"):
        bm.copy_device_buffer(src_handle, dst_handle, size_bytes)
    assert_same_bytes(bm.download_from_device(dst_handle, (1000,), np.float32), dst)
    assert_same_bytes(bm.download_from_device(src_handle, (100,), np.float32), src)


def test_copy_past_the_destination(bm):
    src, dst = random_array((1000,), np.float32), random_array((100,), np.float32)
    src_handle, dst_handle = bm.upload_to_device(src), bm.upload_to_device(dst)
    with expect_error(CL_INVALID_VALUE, "write of 4000 bytes", "400-byte"):
        bm.copy_device_buffer(src_handle, dst_handle, 4000)
    assert_same_bytes(bm.download_from_device(dst_handle, (100,), np.float32), dst)


@pytest.mark.parametrize("size_bytes", [-1, 2.0, "4", None, 2**80], ids=repr)
def test_bad_size_bytes(bm, size_bytes):
    src, dst = random_array((10,), np.int8), random_array((10,), np.int8)
    src_handle, dst_handle = bm.upload_to_device(src), bm.upload_to_device(dst)
    with expect_error(CL_INVALID_VALUE, "copy_device_buffer", "size_bytes"):
        bm.copy_device_buffer(src_handle, dst_handle, size_bytes)
    assert_same_bytes(bm.download_from_device(dst_handle, (10,), np.int8), dst)


def test_copy_of_a_buffer_onto_itself_overlaps(bm):
    data = random_array((10,), np.int32)
    handle = bm.upload_to_device(data)
    with expect_error(CL_MEM_COPY_OVERLAP, "CL_MEM_COPY_OVERLAP (-8)"):
        bm.copy_device_buffer(handle, handle, 40)
    assert_same_bytes(bm.download_from_device(handle, (10,), np.int32), data)


def test_buffer_of_another_manager_is_rejected(bm, new_manager):
    other = new_manager()
    data = random_array((10,), np.int32)
    foreign = other.upload_to_device(data)
    mine = bm.upload_to_device(random_array((10,), np.int32))
    with expect_error(CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT (-34)"):
        bm.download_from_device(foreign, (10,), np.int32)
    with expect_error(CL_INVALID_CONTEXT):
        bm.copy_device_buffer(foreign, mine, 40)
    with expect_error(CL_INVALID_CONTEXT):
        bm.download_async(foreign)
    assert_same_bytes(other.download_from_device(foreign, (10,), np.int32), data)


def test_cleaned_up_manager_raises_for_every_transfer(new_manager):
    bm = new_manager()
    data = random_array((10,), np.int32)
    handle = bm.upload_to_device(data)
    bm.cleanup()
    bm.cleanup()  # idempotent
    calls = [
        lambda: bm.upload_to_device(data),
        lambda: bm.download_from_device(handle, (10,), np.int32),
        lambda: bm.copy_device_buffer(handle, handle, 0),
        lambda: bm.upload_async(data),
        lambda: bm.download_async(handle),
    ]
    for call in calls:
        with expect_error(CL_SUCCESS, "cleanup"):
            call()
    # the handle and the device description stay usable
    assert handle.nbytes == 40 and handle.shape == (10,)
    assert bm.device.name


def test_bad_selector_lists_the_devices(bm):
    with expect_error(CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND (-1)", "no-such-device-xyz",
                      "devices:"):
        clbuf.BufferManager("no-such-device-xyz")


# ---- devices -------------------------------------------------------------------------------

def test_device_info_and_list_devices(bm):
    info = bm.device
    assert info.name and info.platform
    assert info.type in ("gpu", "cpu", "accelerator", "other")
    assert info.global_mem_bytes > 0 and 0 < info.max_alloc_bytes <= info.global_mem_bytes
    assert info["name"] == info.name
    assert bm.selection_reason
    devices = clbuf.list_devices()
    assert any(d.name == info.name and d.platform == info.platform for d in devices)
    if not any(d.type == "gpu" for d in devices):
        assert info.type == "cpu"  # GPU preferred, CPU fallback


def test_selectors_and_clbuf_device_environment(monkeypatch, bm):
    first = clbuf.list_devices()[0]
    index = f"{first.platform_index}:{first.device_index}"
    chosen = clbuf.BufferManager(index)
    assert chosen.device.name == first.name
    chosen.cleanup()
    monkeypatch.setenv("CLBUF_DEVICE", first.name[:6].upper())
    from_environment = clbuf.BufferManager()
    assert first.name[:6].lower() in from_environment.device.name.lower()
    from_environment.cleanup()
    monkeypatch.setenv("CLBUF_DEVICE", "no-such-device-xyz")
    with expect_error(CL_DEVICE_NOT_FOUND, "CLBUF_DEVICE"):
        clbuf.BufferManager()


# ---- async ---------------------------------------------------------------------------------

def test_upload_async_and_download_async(bm):
    data = random_array((3, 1000), np.float64)
    future = bm.upload_async(data)
    handle = future.get()
    assert future.ready()
    assert handle.shape == (3, 1000) and handle.dtype == np.float64
    pending = bm.download_async(handle)
    pending.wait()
    assert pending.ready()
    result = pending.get()
    assert_same_bytes(result, data)
    assert pending.get() is result  # get() may be called again
    assert_same_bytes(bm.download_async(handle, (1000, 3), np.int64).get(),
                      data.view(np.int64).reshape(1000, 3))


def test_many_transfers_in_flight(bm):
    arrays = [random_array((1 << 16,), dtype) for dtype in NUMERIC_DTYPES]
    uploads = [bm.upload_async(a) for a in arrays]
    handles = [u.get() for u in uploads]
    downloads = [bm.download_async(h) for h in handles]
    for pending, expected in zip(downloads, arrays):
        assert_same_bytes(pending.get(), expected)


def test_async_of_non_contiguous_and_empty_arrays(bm):
    data = random_array((64, 64), np.int16).T
    assert_same_bytes(bm.download_async(bm.upload_async(data).get()).get(), data)
    empty = np.zeros((0, 5), np.float32)
    handle = bm.upload_async(empty).get()
    assert handle.nbytes == 0 and handle.shape == (0, 5)
    assert_same_bytes(bm.download_async(handle).get(), empty)


def test_a_dropped_future_waits_before_releasing_memory(bm):
    data = random_array((1 << 20,), np.float32)
    handle = bm.upload_async(data.copy()).get()
    for _ in range(4):
        bm.download_async(handle)  # dropped at once
        bm.upload_async(random_array((1 << 20,), np.float32))
    assert_same_bytes(bm.download_from_device(handle), data)


def test_async_errors(bm):
    handle = bm.upload_to_device(random_array((10,), np.int32))
    with expect_error(CL_INVALID_VALUE, "download_async"):
        bm.download_async(handle, (11,), np.int32)


# ---- threads -------------------------------------------------------------------------------

def test_four_threads_share_one_manager(bm):
    failures = []
    barrier = threading.Barrier(4)

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for i in range(25):
                n = int(rng.integers(1, 50000))
                data = rng.random(n).astype(np.float32)
                other = np.zeros(n, np.float32)
                a = bm.upload_to_device(data)
                b = bm.upload_async(other).get()
                bm.copy_device_buffer(a, b, data.nbytes)
                if i % 2:
                    result = bm.download_async(b).get()
                else:
                    result = bm.download_from_device(b, (n,), np.float32)
                if result.tobytes() != data.tobytes():
                    failures.append(f"thread {seed} round {i}: data differs")
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(f"thread {seed}: {error!r}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not any(t.is_alive() for t in threads)
    assert failures == []


def test_cleanup_while_other_threads_transfer(new_manager):
    bm = new_manager()
    data = random_array((1 << 16,), np.float32)
    outcomes = []
    start = threading.Event()

    def work():
        start.wait()
        for _ in range(200):
            try:
                handle = bm.upload_to_device(data)
                result = bm.download_from_device(handle, data.shape, data.dtype)
                outcomes.append(result.tobytes() == data.tobytes())
            except clbuf.Error as error:
                outcomes.append(error.code == 0 and "cleanup" in str(error))
                return

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    start.set()
    bm.cleanup()
    for t in threads:
        t.join(timeout=120)
    assert outcomes and all(outcomes)


def test_transfers_release_the_gil(bm):
    """Another Python thread keeps running while a large transfer is in progress."""
    data = random_array((32 << 20,), np.uint8)
    handle = bm.upload_to_device(data)
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(1)
            done.wait(0.0005)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        for _ in range(3):
            before = len(ticks)
            bm.download_from_device(handle, data.shape, data.dtype)
            bm.upload_to_device(data)
            after = len(ticks)
            if after > before:
                break
    finally:
        done.set()
        thread.join()
    assert after > before


# ---- context manager -----------------------------------------------------------------------

def test_context_manager_cleans_up(new_manager):
    manager = new_manager()
    data = random_array((100,), np.int64)
    with manager as bm:
        assert bm is manager
        assert_same_bytes(bm.download_from_device(bm.upload_to_device(data), (100,), np.int64),
                          data)
    with expect_error(CL_SUCCESS, "cleanup"):
        manager.upload_to_device(data)


def test_context_manager_propagates_exceptions(new_manager):
    manager = new_manager()
    with pytest.raises(KeyError):
        with manager:
            raise KeyError("boom")
    with expect_error(CL_SUCCESS):
        manager.upload_to_device(np.zeros(1))


def test_repr(bm):
    handle = bm.upload_to_device(np.zeros((2, 3), np.float32))
    assert repr(handle) == "<clbuf.DeviceBuffer shape=(2, 3) dtype=float32 nbytes=24>"
    assert "clbuf.DeviceInfo" in repr(bm.device)


# ---- async uploads keep their array alive ---------------------------------------------------

@pytest.mark.parametrize("count", [1000, 4 << 20], ids=["small", "16MiB"])
def test_upload_async_keeps_a_temporary_array_alive(bm, count):
    """The Future holds the only reference to the array the device reads in place."""
    import gc
    expected = random_array((count,), np.float32)
    future = bm.upload_async(expected.copy())  # the copy's only reference is the Future's
    gc.collect()
    churn = [np.full(count, 7, np.float32) for _ in range(3)]  # reuse freed memory, if any
    assert_same_bytes(bm.download_from_device(future.get()), expected)
    del churn


# ---- stats and memory model ----------------------------------------------------------------

DIRECTIONS = ("upload", "download", "copy")
PATHS = ("host_copy", "staged", "buffered", "bounced", "relayed", "direct")
POOL_KEYS = ("hits", "misses", "released", "trims", "retries", "cached_buffers", "cached_bytes",
             "limit_bytes", "in_use_buffers", "in_use_bytes")
PINNED_KEYS = ("budget_bytes", "allocated_bytes", "in_use_bytes", "cached_bytes", "peak_bytes",
               "leases", "reuses", "allocations", "refusals", "trims", "leaked")


def test_memory_model(bm):
    assert bm.memory_model in ("host", "unified", "discrete")
    if bm.device.type == "cpu":
        assert bm.memory_model == "host"


def test_stats_layout_and_fresh_counters(new_manager):
    bm = new_manager()
    stats = bm.stats()
    assert set(stats) == {"summary", "upload", "download", "copy", "pool", "pinned"}
    for direction in DIRECTIONS:
        assert stats[direction] == {"operations": 0, "bytes": 0, "nanoseconds": 0,
                                    "gigabytes_per_second": 0.0,
                                    "paths": {path: 0 for path in PATHS}}
    assert set(stats["pool"]) == set(POOL_KEYS)
    assert stats["pool"]["limit_bytes"] > 0
    assert set(stats["pinned"]) == set(PINNED_KEYS)
    assert stats["pinned"]["budget_bytes"] == clbuf._clbuf._options(bm)["pinned_budget_bytes"]
    assert stats["pinned"]["allocated_bytes"] == 0 and stats["pinned"]["peak_bytes"] == 0
    summary = stats["summary"]
    assert isinstance(summary, str) and "\n" not in summary
    for word in ("upload 0 ops", "download 0 ops", "copy 0 ops", "pool"):
        assert word in summary, (word, summary)


def test_stats_count_each_transfer(new_manager):
    bm = new_manager()
    a = random_array((1000,), np.float32)
    b = random_array((500,), np.float64)
    ha = bm.upload_to_device(a)
    hb = bm.upload_to_device(b)
    bm.download_from_device(ha)
    bm.copy_device_buffer(ha, hb, 1000)
    bm.copy_device_buffer(ha, hb, 0)  # moves nothing, counts nothing
    bm.download_async(hb).get()
    bm.upload_async(a).get()
    stats = bm.stats()
    assert stats["upload"]["operations"] == 3
    assert stats["upload"]["bytes"] == 2 * a.nbytes + b.nbytes
    assert stats["download"]["operations"] == 2
    assert stats["download"]["bytes"] == a.nbytes + b.nbytes
    assert stats["copy"]["operations"] == 1 and stats["copy"]["bytes"] == 1000
    for direction in DIRECTIONS:
        assert stats[direction]["nanoseconds"] > 0  # each has a blocking call
        assert stats[direction]["gigabytes_per_second"] > 0
        # each operation on one path (which: the C++ suite's PathBoundaries)
        assert set(stats[direction]["paths"]) == set(PATHS)
        assert sum(stats[direction]["paths"].values()) == stats[direction]["operations"]
    assert "upload 3 ops" in stats["summary"]
    assert "download 2 ops" in stats["summary"]
    assert "copy 1 ops" in stats["summary"]
    # a failed call moves nothing and counts nothing
    with expect_error(CL_INVALID_VALUE):
        bm.copy_device_buffer(hb, ha, hb.nbytes + 1)
    assert bm.stats()["copy"]["operations"] == 1


def test_stats_show_pool_reuse_and_reset(new_manager):
    bm = new_manager()
    data = random_array((4096,), np.uint8)
    for _ in range(5):
        handle = bm.upload_to_device(data)
        del handle  # back to the pool
    pool = bm.stats()["pool"]
    assert pool["misses"] >= 1 and pool["hits"] >= 4
    assert pool["cached_buffers"] >= 1 and pool["cached_bytes"] >= data.nbytes
    bm.reset_stats()
    stats = bm.stats()
    for direction in DIRECTIONS:
        assert stats[direction]["operations"] == 0 and stats[direction]["bytes"] == 0
    assert stats["pool"]["cached_buffers"] == pool["cached_buffers"]  # the pool is not reset


def test_stats_and_memory_model_after_cleanup(new_manager):
    bm = new_manager()
    model = bm.memory_model
    bm.upload_to_device(random_array((10,), np.int32))
    bm.cleanup()
    assert bm.memory_model == model
    stats = bm.stats()
    assert stats["upload"]["operations"] == 1
    assert stats["pool"]["cached_buffers"] == 0  # cleanup() empties the pool
