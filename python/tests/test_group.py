# SPDX-License-Identifier: MIT
"""clbuf.DeviceGroup, ShardedBuffer and ShardedHalo (issue 36 item 6): numpy arrays split over
several devices in one process. CTest runs this file on 2 PoCL devices (python.group:
POCL_DEVICES="pthread pthread"); the whole python.pytest run includes it on whatever devices the
default selection finds (one PoCL device here), so every test holds for any device count."""
import gc
import math
import os
import sys
import threading
from fractions import Fraction

import numpy as np
import pytest

import clbuf

RNG = np.random.default_rng(36)

# The devices of the group under test: CLBUF_TEST_GROUP (python.group_two_platforms: "all", PoCL's
# CPU and oclgrind's device), else the default selection.
SELECTOR = os.environ.get("CLBUF_TEST_GROUP", "")

DTYPES = [np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128)]


def random_array(shape, dtype):
    """Random bytes (NaN payloads and infinities included), which must come back bit for bit."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    raw = RNG.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def same_bytes(result, expected):
    return (result.dtype == expected.dtype and result.shape == expected.shape
            and result.tobytes() == np.ascontiguousarray(expected).tobytes())


def open_group(**kwargs):
    try:
        return clbuf.DeviceGroup(SELECTOR, **kwargs)
    except clbuf.Error as error:
        if os.environ.get("CLBUF_REQUIRE_DEVICE") == "1":
            pytest.fail(f"CLBUF_REQUIRE_DEVICE=1 but no OpenCL device: {error}")
        pytest.skip(f"no OpenCL device: {error}")


@pytest.fixture(scope="module")
def group():
    return open_group()


def shard_contents(group, sharded, i):
    """Shard i as device i holds it: ghost elements, its part, ghost elements."""
    return group.manager(i).download_from_device(sharded.shard(i))


def expected_split(count, weights, unit=1):
    """Partition.weighted's counts: the exact shares (Fractions) rounded down, then one unit each
    to the largest remainders (the lower device on ties)."""
    units = count // unit
    exact = [Fraction(float(w)) for w in weights]
    total = sum(exact)
    shares = [units * w / total for w in exact]
    parts = [math.floor(s) for s in shares]
    rest = [s - p for s, p in zip(shares, parts)]
    order = sorted(range(len(rest)), key=lambda i: (-rest[i], i))
    for i in order[:units - sum(parts)]:
        parts[i] += 1
    return [p * unit for p in parts]


# ---- the group --------------------------------------------------------------------------------

def test_the_group_has_the_devices_pocl_was_given(group):
    assert len(group) == group.size >= 1
    if os.environ.get("POCL_DEVICES") == "pthread pthread":
        assert len(group) == 2
    assert group.sharing == "per_platform"
    if SELECTOR == "all":
        assert len(group) == len(clbuf.list_devices())
    assert "picked" in group.explain_selection()
    for i in range(len(group)):
        bm = group.manager(i)
        assert isinstance(bm, clbuf.BufferManager)
        assert group.shares_context(i, i)
        for j in range(len(group)):
            same_platform = bm.device.platform_index == group.manager(j).device.platform_index
            assert group.shares_context(i, j) == same_platform
    with pytest.raises(clbuf.Error) as error:
        group.manager(len(group))
    assert error.value.code == -30 and "DeviceGroup.manager" in str(error.value)
    with pytest.raises(clbuf.Error):
        group.shares_context(0, len(group))
    assert "clbuf.DeviceGroup of" in repr(group)


def test_a_manager_keeps_the_group_alive_and_works_on_its_device():
    group = open_group()
    count = len(group)
    managers = [group.manager(i) for i in range(count)]
    names = [m.device.name for m in managers]
    del group
    gc.collect()
    for bm, name in zip(managers, names):
        assert bm.device.name == name
        data = np.arange(100, dtype=np.int32)
        assert same_bytes(bm.download_from_device(bm.upload_to_device(data)), data)


def test_groups_from_devices_from_managers_and_with_a_context_each(group):
    devices = [group.manager(i).device for i in range(len(group))]
    by_list = clbuf.DeviceGroup(tuple(devices))
    assert [by_list.manager(i).device.name for i in range(len(by_list))] == \
        [d.name for d in devices]
    separate = clbuf.DeviceGroup(devices, separate_contexts=True)
    assert separate.sharing == "per_device"
    for i in range(len(separate)):
        for j in range(len(separate)):
            assert separate.shares_context(i, j) == (i == j)
    data = random_array((3, 7), np.float64)
    assert same_bytes(separate.gather(separate.scatter(data)), data)
    managers = [clbuf.BufferManager() for _ in range(2)]
    adopted = clbuf.DeviceGroup(managers)
    assert len(adopted) == 2 and adopted.sharing == "per_device"
    assert "adopted" in adopted.explain_selection()
    assert same_bytes(adopted.gather(adopted.scatter(data)), data)


# ---- scatter and gather -----------------------------------------------------------------------

def sizes(devices):
    return sorted({0, 1, max(devices - 1, 0), 7, 257})


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_scatter_gather_is_exact_for_every_dtype_and_awkward_size(group, dtype):
    devices = len(group)
    for size in sizes(devices):
        data = random_array((size,), dtype)
        sharded = group.scatter(data)
        assert sharded.size == len(sharded) == size and sharded.dtype == dtype
        assert sharded.shape == (size,) and sharded.nbytes == data.nbytes
        assert sharded.shards == devices and sharded.ghost == 0 and sharded.unit == 1
        counts = [sharded.count(i) for i in range(devices)]
        assert counts == expected_split(size, [1] * devices)
        assert [sharded.offset(i) for i in range(devices)] == list(np.cumsum([0] + counts[:-1]))
        for i in range(devices):
            shard = sharded.shard(i)
            assert shard.dtype == dtype and shard.size == counts[i]
            if counts[i]:
                part = data[sharded.offset(i):sharded.offset(i) + counts[i]]
                assert same_bytes(shard_contents(group, sharded, i), part)
        assert same_bytes(group.gather(sharded), data)
        out = np.empty_like(data)
        assert group.download(sharded, out) is out and same_bytes(out, data)
        again = random_array((size,), dtype)
        group.upload(sharded, again)
        assert same_bytes(group.download(sharded), again)


@pytest.mark.parametrize("dtype", [np.dtype(np.int16), np.dtype(np.complex128)], ids=str)
def test_n_dimensional_arrays_keep_their_shape(group, dtype):
    data = random_array((5, 3, 4), dtype)
    sharded = group.scatter(data, unit=12)
    assert sharded.shape == (5, 3, 4) and sharded.size == 60
    assert all(sharded.count(i) % 12 == 0 for i in range(len(group)))
    assert same_bytes(group.gather(sharded), data)
    assert same_bytes(group.download(sharded), data)
    # the other objects with the buffer protocol, as BufferManager takes them
    raw = bytes(range(7))
    assert group.gather(group.scatter(raw)).tobytes() == raw


def test_weights_and_units_split_as_the_partition_says(group):
    devices = len(group)
    weights = [i + 1 for i in range(devices)]
    for size, unit in ((0, 1), (1, 1), (10, 1), (257, 1), (120, 4), (36, 12)):
        data = random_array((size,), np.float32)
        sharded = group.scatter(data, weights=weights, unit=unit)
        assert [sharded.count(i) for i in range(devices)] == expected_split(size, weights, unit)
        assert same_bytes(group.gather(sharded), data)
    if devices > 1:
        zero_first = [0.0] + [1.0] * (devices - 1)
        sharded = group.scatter(np.arange(10, dtype=np.int64), weights=zero_first)
        assert sharded.count(0) == 0 and sharded.shard(0).size == 0
        assert same_bytes(group.gather(sharded), np.arange(10, dtype=np.int64))
    numpy_weights = np.array(weights, dtype=np.float64)
    sharded = group.scatter(np.arange(20, dtype=np.uint8), weights=numpy_weights)
    assert [sharded.count(i) for i in range(devices)] == expected_split(20, weights)
    as_int32 = lambda w: np.array(w, dtype=np.int32)  # noqa: E731
    for kind in (tuple, as_int32, lambda w: [np.float32(x) for x in w]):
        sharded = group.scatter(np.arange(20, dtype=np.uint8), weights=kind(weights))
        assert [sharded.count(i) for i in range(devices)] == expected_split(20, weights)


def test_weights_up_to_the_largest_float_split_exactly(group):
    devices = len(group)
    largest, least = sys.float_info.max, 5e-324
    data = np.arange(10, dtype=np.int16)
    cases = [[1e308] * devices, [largest] * devices, [least] * devices,
             [1e308] * (devices - 1) + [0], [1e308] + [1e-308] * (devices - 1),
             [largest] + [least] * (devices - 1), [least] + [largest] * (devices - 1),
             [0] * (devices - 1) + [largest]]
    for weights in cases:
        if not any(w > 0 for w in weights):
            continue
        counts = [group.scatter(data, weights=weights).count(i) for i in range(devices)]
        assert counts == expected_split(10, weights), weights
        assert sum(counts) == 10
        if len(set(weights)) == 1:
            assert max(counts) - min(counts) <= 1, (weights, counts)
        assert all(c == 0 for c, w in zip(counts, weights) if w == 0), (weights, counts)
        ordered = sorted(range(devices), key=lambda i: weights[i])
        assert [counts[i] for i in ordered] == sorted(counts), (weights, counts)
    sharded = group.scatter(data, weights=np.full(devices, 1e308))
    assert [sharded.count(i) for i in range(devices)] == expected_split(10, [1] * devices)
    assert same_bytes(group.gather(sharded), data)


def test_async_forms_return_one_future_each(group):
    data = random_array((1001,), np.float64)
    pending = group.scatter_async(data, weights=[1] * len(group))
    assert isinstance(pending, clbuf.Future)
    sharded = pending.get()
    assert isinstance(sharded, clbuf.ShardedBuffer)
    assert same_bytes(group.gather_async(sharded).get(), data)
    again = random_array((1001,), np.float64)
    group.upload_async(sharded, again).wait()
    out = np.empty_like(again)
    assert group.download_async(sharded, out).get() is out and same_bytes(out, again)
    other = group.empty(1001, np.float64)
    assert group.copy_async(sharded, other).get() is None
    assert same_bytes(group.gather(other), again)
    group.fill_async(other, 2.5).wait()
    assert (group.gather(other) == 2.5).all()
    halo = group.scatter_async(np.arange(12, dtype=np.int32), unit=2, halo=1).get()
    twelve = np.arange(12, dtype=np.int32)
    assert same_bytes(group.gather(halo), twelve)
    for i in range(len(group)):
        expected = with_ghosts(twelve, halo, i, np.int32(0))
        assert same_bytes(shard_contents(group, halo, i), expected)


def test_copy_and_fill_leave_the_ghost_elements(group):
    data = np.arange(40, dtype=np.int16)
    source = group.scatter(data, unit=4, halo=1)
    dest = group.empty(40, np.int16, unit=4, halo=1)
    group.fill(dest, 0)
    group.copy(source, dest)
    assert same_bytes(group.gather(dest), data)
    group.fill(source, -3)
    assert (group.gather(source) == -3).all()
    for i in range(len(group)):
        held = shard_contents(group, source, i)
        g = source.ghost
        assert (held[g:g + source.count(i)] == -3).all()
        expected = with_ghosts(data, source, i, np.int16(0))
        assert same_bytes(held[:g], expected[:g]) and same_bytes(held[len(held) - g:],
                                                               expected[len(held) - g:])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_fill_stores_values_exactly_or_refuses_them(group, dtype):
    sharded = group.scatter(random_array((13,), dtype))
    value = {"b": True, "i": -5, "u": 200, "f": 0.5, "c": 1.5 - 2j}[dtype.kind]
    group.fill(sharded, value)
    assert same_bytes(group.gather(sharded), np.full(13, value, dtype=dtype))
    bad = {"b": 2, "i": 1.7, "u": -1, "f": 1e39, "c": "x"}[dtype.kind]
    if dtype == np.float64:
        bad = 2**53 + 1  # no float64 holds it
    with pytest.raises(clbuf.Error) as error:
        group.fill(sharded, bad)
    assert error.value.code == -30 and "DeviceGroup.fill" in str(error.value)
    assert same_bytes(group.gather(sharded), np.full(13, value, dtype=dtype))  # nothing changed


def test_large_moves_run_on_every_device_at_once_and_stay_exact(group):
    # 1 MiB a device and more: the C++ group moves the shards on a thread a device
    data = random_array((3 << 19,) if len(group) == 1 else (len(group) << 19,), np.float32)
    data = np.concatenate([data, random_array((3,), np.float32)])  # and not evenly
    sharded = group.scatter(data)
    assert same_bytes(group.gather(sharded), data)
    again = random_array(data.shape, np.float32)
    group.upload(sharded, again)
    out = np.empty_like(again)
    group.download(sharded, out)
    assert same_bytes(out, again)
    copy = group.empty(data.shape, np.float32)
    group.copy(sharded, copy)
    assert same_bytes(group.gather(copy), again)


def test_python_threads_share_one_group(group):
    if any("Oclgrind" in group.manager(i).device.platform for i in range(len(group))):
        pytest.skip("oclgrind is not thread-safe (as device_group_test skips it)")
    failures = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(20):
                data = rng.random(int(rng.integers(0, 3000)))
                sharded = group.scatter(data, halo=int(rng.integers(0, 3)))
                if sharded.ghost:
                    clbuf.ShardedHalo(group, sharded).exchange(sharded)
                group.fill(sharded, 1.5)
                assert (group.gather_async(sharded).get() == 1.5).all()
                group.upload(sharded, data)
                assert same_bytes(group.gather(sharded), data)
        except Exception as error:  # noqa: BLE001 (reported below)
            failures.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


# ---- halos ------------------------------------------------------------------------------------

def with_ghosts(array, sharded, i, beyond):
    """What shard i holds once its ghost elements hold the array's neighbours (`beyond` past
    the array's ends)."""
    flat = np.ravel(array)
    g, first = sharded.ghost, sharded.offset(i)
    out = np.full(sharded.count(i) + 2 * g, beyond, dtype=flat.dtype)
    for k in range(len(out)):
        x = first - g + k
        if 0 <= x < len(flat):
            out[k] = flat[x]
    return out


@pytest.mark.parametrize("shape,halo", [((9, 6), 1), ((7, 4, 5), 1), ((10, 3), 2)])
def test_halo_exchange_matches_numpy(group, shape, halo):
    unit = int(np.prod(shape[1:]))
    field = group.scatter(np.zeros(shape), unit=unit, halo=halo)
    assert field.ghost == halo * unit
    plan = clbuf.ShardedHalo(group, field)
    copies = plan.copies()
    assert all(set(c) == {"from", "from_offset", "to", "to_offset", "count"} for c in copies)
    assert sum(c["count"] for c in copies) <= 2 * halo * unit * len(group)
    for step in range(3):
        data = RNG.random(shape)
        group.upload(field, data)  # the ghost elements are stale now
        if step == 0:
            plan.exchange(field)
        else:
            plan.start(field)
            plan.finish()
        for i in range(len(group)):
            assert same_bytes(shard_contents(group, field, i), with_ghosts(data, field, i, 0.0))
    plan.finish()  # nothing under way: nothing to do


def test_pieces_on_one_device_move_and_exchange_halos_as_numpy(group):
    # max_shard_bytes caps a shard (its ghost rows included): every device holds its part as
    # several shards of whole rows, in order; halos between shards of one device too.
    shape, halo = (40, 7), 1
    unit = shape[1]
    cap = 8 * unit * (3 + 2 * halo)  # three float64 rows a shard beside its ghost rows
    data = RNG.random(shape)
    field = group.scatter(data, unit=unit, halo=halo, max_shard_bytes=cap)
    assert field.shards >= 2 * len(group) - 1
    devices = [field.device(i) for i in range(field.shards)]
    assert devices == sorted(devices) and set(devices) == set(range(len(group)))
    assert all(field.count(i) % unit == 0 and field.shard(i).nbytes <= cap
               for i in range(field.shards))
    assert same_bytes(group.gather(field), data)
    fresh = RNG.random(shape)
    group.upload(field, fresh)
    clbuf.ShardedHalo(group, field).exchange(field)
    for i in range(field.shards):
        held = group.manager(field.device(i)).download_from_device(field.shard(i))
        assert same_bytes(held, with_ghosts(fresh, field, i, 0.0)), i
    other = group.empty(shape, np.float64, unit=unit, halo=halo, max_shard_bytes=cap)
    group.copy(field, other)
    group.fill(field, 2.0)
    assert same_bytes(group.gather(other), fresh)
    assert (group.gather_async(field).get() == 2.0).all()
    with pytest.raises(clbuf.Error, match="holds no unit"):
        group.scatter(data, unit=unit, halo=halo, max_shard_bytes=8 * unit * 2)


def test_one_plan_exchanges_both_fields_of_a_ping_pong(group):
    data = np.arange(8 * 5, dtype=np.float32).reshape(8, 5)
    a = group.scatter(data, unit=5, halo=1)
    b = group.empty((8, 5), np.float32, unit=5, halo=1)
    group.fill(b, 0)
    plan = clbuf.ShardedHalo(group, a)
    group.upload(b, data * 2)
    plan.exchange(b)
    for i in range(len(group)):
        held = shard_contents(group, b, i)
        expected = with_ghosts(data * 2, b, i, np.float32(0))
        g = b.ghost
        inner = [k for k in range(len(held)) if 0 <= b.offset(i) - g + k < data.size]
        assert same_bytes(held[inner], expected[inner])


def test_halo_exchange_between_separate_contexts(group):
    devices = [group.manager(i).device for i in range(len(group))]
    separate = clbuf.DeviceGroup(devices, separate_contexts=True)
    data = RNG.random((6, 4))
    field = separate.scatter(np.zeros((6, 4)), unit=4, halo=1)
    separate.upload(field, data)
    clbuf.ShardedHalo(separate, field).exchange(field)
    for i in range(len(separate)):
        assert same_bytes(shard_contents(separate, field, i), with_ghosts(data, field, i, 0.0))


# ---- shards for kernels -----------------------------------------------------------------------

DOUBLE = """
__kernel void twice(__global float* a, ulong first) { a[first + get_global_id(0)] *= 2.0f; }
"""


def test_a_pyopencl_kernel_runs_on_each_shard_by_int_ptr(group):
    cl = pytest.importorskip("pyopencl")
    data = RNG.random(1001).astype(np.float32)
    sharded = group.scatter(data, halo=1)
    for i in range(len(group)):
        bm = group.manager(i)
        context = cl.Context.from_int_ptr(bm.context_int_ptr, retain=True)
        queue = cl.CommandQueue.from_int_ptr(bm.queue_int_ptr, retain=True)
        shard = sharded.shard(i)
        mem = cl.Buffer.from_int_ptr(shard.int_ptr, retain=True)
        assert mem.int_ptr == shard.int_ptr  # the shard's own memory: no copy
        program = cl.Program(context, DOUBLE).build()
        first = shard.native_offset_bytes // 4 + sharded.ghost
        if sharded.count(i):
            program.twice(queue, (sharded.count(i),), None, mem, np.uint64(first))
        queue.finish()
    np.testing.assert_array_equal(group.gather(sharded), data * 2)


def test_to_pyopencl_arrays_of_the_shards_compute_in_place(group):
    pytest.importorskip("pyopencl.array")
    data = np.arange(30, dtype=np.float64)
    sharded = group.scatter(data)
    for i in range(len(group)):
        if sharded.count(i):
            array = sharded.shard(i).to_pyopencl()
            array *= 3
            array.queue.finish()
    np.testing.assert_array_equal(group.gather(sharded), data * 3)


def test_a_shard_outlives_its_sharded_buffer_and_group():
    group = open_group()
    data = np.arange(50, dtype=np.int64)
    sharded = group.scatter(data)
    shards = [(sharded.shard(i), sharded.offset(i), sharded.count(i)) for i in range(len(group))]
    managers = [group.manager(i) for i in range(len(group))]
    del sharded, group
    gc.collect()
    for (shard, first, count), bm in zip(shards, managers):
        assert same_bytes(bm.download_from_device(shard), data[first:first + count])
        if count > 1:
            view = shard[1:]  # a view of a shard's DeviceBuffer, as of any other
            assert same_bytes(bm.download_from_device(view), data[first + 1:first + count])


# ---- bad input: a clbuf.Error, nothing changed ------------------------------------------------

def assert_refused(call, *words, code=-30):
    with pytest.raises(clbuf.Error) as error:
        call()
    assert error.value.code == code, str(error.value)
    for word in words:
        assert word in str(error.value), str(error.value)
    return error.value


def test_a_sharded_buffer_of_another_group_is_refused(group):
    other = open_group()
    theirs = other.scatter(np.arange(10, dtype=np.int32))
    mine = group.scatter(np.arange(10, dtype=np.int32))
    assert_refused(lambda: group.gather(theirs), "DeviceGroup.gather", "another DeviceGroup")
    assert_refused(lambda: group.upload(theirs, np.zeros(10, np.int32)), "another DeviceGroup")
    assert_refused(lambda: group.copy(mine, theirs), "another DeviceGroup")
    assert_refused(lambda: group.fill(theirs, 1), "another DeviceGroup")
    assert_refused(lambda: clbuf.ShardedHalo(group, theirs), "another DeviceGroup")
    assert same_bytes(other.gather(theirs), np.arange(10, dtype=np.int32))
    assert_refused(lambda: group.gather(np.zeros(3)), "must be a clbuf.ShardedBuffer", "ndarray")
    assert_refused(lambda: group.gather(clbuf.ShardedBuffer.__new__(clbuf.ShardedBuffer)),
                   "uninitialised")
    assert_refused(lambda: clbuf.ShardedBuffer.__new__(clbuf.ShardedBuffer).size,
                   "never initialised", code=0)


def test_wrong_dtype_or_size_changes_nothing(group):
    data = np.arange(11, dtype=np.float32)
    sharded = group.scatter(data)
    assert_refused(lambda: group.upload(sharded, np.zeros(11, np.float64)), "dtype", "float32")
    assert_refused(lambda: group.upload(sharded, np.zeros(12, np.float32)), "12 elements", "11")
    assert_refused(lambda: group.upload_async(sharded, np.zeros(10, np.float32)), "10 elements")
    assert_refused(lambda: group.download(sharded, np.zeros(11, np.int32)), "dtype")
    assert_refused(lambda: group.download(sharded, np.zeros(10, np.float32)), "10 elements")
    assert_refused(lambda: group.download(sharded, np.zeros(22, np.float32)[::2]), "out")
    assert_refused(lambda: group.download(sharded, b"x" * 44), "out")
    assert same_bytes(group.gather(sharded), data)
    ints = group.scatter(np.arange(11, dtype=np.int32))
    assert_refused(lambda: group.copy(sharded, ints), "float32", "int32")
    if len(group) > 1:
        skewed = group.scatter(np.zeros(11, np.float32), weights=[1] * (len(group) - 1) + [5])
        assert_refused(lambda: group.copy(sharded, skewed), "split differently")
    assert_refused(lambda: group.fill(sharded, "1"), "DeviceGroup.fill")
    assert same_bytes(group.gather(sharded), data)
    assert_refused(lambda: sharded.shard(len(group)), "ShardedBuffer.shard")
    assert_refused(lambda: sharded.offset(-1), "ShardedBuffer.offset")
    assert_refused(lambda: sharded.count(len(group)), "ShardedBuffer.count")


def test_bad_splits_are_refused_before_anything_moves(group):
    data = np.arange(10, dtype=np.float64)
    assert_refused(lambda: group.scatter(data, unit=3), "units of 3 elements", "10 elements")
    assert_refused(lambda: group.scatter(data, unit=0), "units of 0")
    assert_refused(lambda: group.scatter(data, unit=-1), "unit")
    assert_refused(lambda: group.scatter(data, halo=-1), "halo")
    assert_refused(lambda: group.scatter(data, weights=[1] * (len(group) + 1)), "weights")
    assert_refused(lambda: group.scatter(data, weights=[0] * len(group)), "every weight is 0")
    assert_refused(lambda: group.scatter(data, weights=[-1] * len(group)), "weight 0")
    assert_refused(lambda: group.scatter(data, weights=[math.nan] * len(group)), "weight 0")
    assert_refused(lambda: group.scatter(data, weights=["1"] * len(group)), "weight 0", "str")
    assert_refused(lambda: group.scatter(data, weights=[True] * len(group)), "weight 0")
    assert_refused(lambda: group.scatter(data, weights="11"), "weights")
    assert_refused(lambda: group.scatter(data, weights=[]), f"0 weights for {len(group)} devices")
    assert_refused(lambda: group.scatter(data, weights=[math.inf] * len(group)), "weight 0")
    assert_refused(lambda: group.scatter(data, weights=[-math.inf] + [1] * (len(group) - 1)),
                   "weight 0 is -inf")
    assert_refused(lambda: group.scatter(data, weights=[-1e-300] + [1] * (len(group) - 1)),
                   "weight 0 is -1", "e-300")
    assert_refused(lambda: group.scatter(data, weights=[10 ** 400] * len(group)), "weight 0")
    assert_refused(lambda: group.scatter([1, 2, 3]), "list")
    assert_refused(lambda: group.scatter(np.array(["a"])), "not numeric")
    assert_refused(lambda: group.scatter_async(data, unit=3), "DeviceGroup.scatter_async")
    assert_refused(lambda: group.empty(10, np.float64, unit=4), "units of 4")


def test_bad_halos_and_selectors_are_refused(group):
    plain = group.scatter(np.zeros(12))
    assert_refused(lambda: clbuf.ShardedHalo(group, plain), "no ghost layer")
    field = group.scatter(np.zeros((6, 2)), unit=2, halo=1)
    plan = clbuf.ShardedHalo(group, field)
    ints = group.scatter(np.zeros((6, 2), np.int64), unit=2, halo=1)
    assert_refused(lambda: plan.start(ints), "ShardedHalo.start", "float64")
    other_halo = group.scatter(np.zeros((6, 2)), unit=2, halo=2)
    assert_refused(lambda: plan.start(other_halo), "laid out otherwise")
    assert_refused(lambda: plan.exchange(plain), "laid out otherwise")
    plan.start(field)
    assert_refused(lambda: plan.start(field), "under way", code=-59)
    plan.finish()
    assert_refused(lambda: clbuf.ShardedHalo(np.zeros(2), field), "clbuf.DeviceGroup")
    assert_refused(lambda: clbuf.DeviceGroup(3), "selector", "int")
    assert_refused(lambda: clbuf.DeviceGroup([1, 2]), "DeviceInfo", "int")
    assert_refused(lambda: clbuf.DeviceGroup([]), "empty list", code=-30)
    assert_refused(lambda: clbuf.DeviceGroup("no device is called this"), "no device matches",
                   code=-1)
    assert_refused(lambda: clbuf.DeviceGroup([group.manager(0)], separate_contexts=True),
                   "separate_contexts")
    assert_refused(lambda: clbuf.DeviceGroup(separate_contexts=1), "separate_contexts", "int")
    assert clbuf.DeviceGroup(separate_contexts=np.bool_(True)).sharing == "per_device"


def test_a_group_whose_manager_was_cleaned_up_raises_and_does_not_crash():
    group = open_group()
    sharded = group.scatter(np.arange(100, dtype=np.float32))
    assert sharded.group is group
    group.manager(len(group) - 1).cleanup()  # closes the group's last device
    with pytest.raises(clbuf.Error):
        group.gather(sharded)
    with pytest.raises(clbuf.Error):
        group.scatter(np.arange(100, dtype=np.float32))
    del sharded, group
    gc.collect()
