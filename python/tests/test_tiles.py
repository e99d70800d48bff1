# SPDX-License-Identifier: MIT
"""clbuf.stream_tiles and clbuf.plan_tiles (issue 43 item 2, the Python form of
clbuf::stream_tiles): a pyopencl kernel (y = 2x + 1) run tile by tile over numpy arrays several
tiles long equals numpy, in place and out of place, with 1, 2 and 3 tiles in flight, sizes 0, 1,
a tile minus one, a tile plus one; a function that raises at tile k stops the stream with an
error naming tile k, the tiles before k written and nothing after."""
import threading

import numpy as np
import pytest

import clbuf

cl = pytest.importorskip("pyopencl")

TILE = 64
CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
          np.dtype(np.int32): "int"}
SOURCE = "".join(f"""
__kernel void affine_{t}(__global const {t}* x, __global {t}* y, const unsigned long n) {{
  const size_t i = get_global_id(0);
  if (i < n) y[i] = ({t})2 * x[i] + ({t})1;
}}
""" for t in CTYPES.values()) + """
__kernel void widen(__global const float* x, __global double* y, const unsigned long n) {
  const size_t i = get_global_id(0);
  if (i < n) y[i] = 2.0 * (double)x[i] + 1.0;
}
"""


@pytest.fixture(scope="module")
def shared():
    """A pyopencl context and queue, a clbuf manager on them, the kernels built once."""
    try:
        device = cl.get_platforms()[0].get_devices()[0]
    except cl.Error as error:
        pytest.skip(f"no OpenCL device for pyopencl: {error}")
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    bm = clbuf.BufferManager.from_pyopencl(queue)
    program = cl.Program(context, SOURCE).build()
    yield bm, program
    bm.cleanup()


def affine(program, dtype, seen=None):
    """fn(tile): y = 2x + 1 on the tile's count elements, after the tile's upload."""
    kernel = getattr(program, "affine_" + CTYPES[np.dtype(dtype)])

    def fn(tile):
        if seen is not None:
            seen.append((tile.index, tile.tiles, tile.first, tile.count, threading.get_ident()))
        x = cl.Buffer.from_int_ptr(tile.input.int_ptr, retain=True)
        y = cl.Buffer.from_int_ptr(tile.output.int_ptr, retain=True)
        return kernel(tile.queue, (tile.count,), None, x, y, np.uint64(tile.count),
                      wait_for=tile.wait_for)
    return fn


def data_of(dtype, count):
    return (np.arange(count) % 1000 - 300).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("in_flight", [1, 2, 3])
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
def test_a_pyopencl_kernel_over_tiles_equals_numpy(shared, dtype, in_flight, in_place):
    bm, program = shared
    for count in (0, 1, TILE - 1, TILE, TILE + 1, 7 * TILE + 5):
        data = data_of(dtype, count)
        expected = 2 * data + 1
        seen = []
        fn = affine(program, dtype, seen)
        if in_place:
            result = clbuf.stream_tiles(bm, data, fn, out=data, tile_elements=TILE,
                                        in_flight=in_flight)
            assert result is data
        else:
            result = clbuf.stream_tiles(bm, data, fn, tile_elements=TILE, in_flight=in_flight)
            assert result.dtype == data.dtype and result.shape == data.shape
        np.testing.assert_array_equal(result, expected, err_msg=f"count {count}")
        tiles = -(-count // TILE)
        assert [s[:4] for s in seen] == [
            (k, tiles, k * TILE, min(TILE, count - k * TILE)) for k in range(tiles)]
        assert {s[4] for s in seen} <= {threading.get_ident()}  # called on this thread


def test_the_tile_gives_its_buffers_queue_and_wait_list(shared):
    bm, program = shared
    data = data_of(np.float32, 3 * TILE)
    tiles = []

    def fn(tile):
        tiles.append(tile)
        assert tile.input.shape == (TILE,) and tile.input.dtype == np.float32
        assert tile.output.dtype == np.float64 and tile.output.int_ptr != tile.input.int_ptr
        assert isinstance(tile.queue, cl.CommandQueue)
        assert tile.queue.int_ptr == tile.queue_int_ptr
        assert tile.queue.context.int_ptr == bm.context_int_ptr
        assert all(isinstance(e, cl.Event) for e in tile.wait_for) and tile.wait_for
        return None  # no kernel: the output's contents are unspecified, its layout is checked

    out = clbuf.stream_tiles(bm, data, fn, dtype=np.float64, tile_elements=TILE)
    assert out.dtype == np.float64 and out.shape == data.shape and len(tiles) == 3
    assert tiles[2].index == 2 and tiles[2].count == TILE  # still readable after the stream


def test_another_output_dtype_and_a_strided_input(shared):
    bm, program = shared
    wide = np.arange(5 * TILE + 3, dtype=np.float32) * np.float32(0.5)
    data = np.repeat(wide, 2)[::2]  # not contiguous: streamed from a contiguous copy

    def fn(tile):
        x = cl.Buffer.from_int_ptr(tile.input.int_ptr, retain=True)
        y = cl.Buffer.from_int_ptr(tile.output.int_ptr, retain=True)
        return program.widen(tile.queue, (tile.count,), None, x, y, np.uint64(tile.count),
                             wait_for=tile.wait_for)

    out = clbuf.stream_tiles(bm, data, fn, dtype=np.float64, tile_elements=TILE, in_flight=3)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, 2 * wide.astype(np.float64) + 1)
    given = np.zeros(data.size, np.float64)
    assert clbuf.stream_tiles(bm, data, fn, out=given, tile_elements=TILE) is given
    np.testing.assert_array_equal(given, out)


def test_a_function_returning_none_or_a_future_is_waited_for(shared):
    bm, program = shared
    data = data_of(np.int32, 5 * TILE + 1)
    kernel = program.affine_int

    def enqueue_only(tile):  # None: every command it enqueued on tile.queue
        x = cl.Buffer.from_int_ptr(tile.input.int_ptr, retain=True)
        y = cl.Buffer.from_int_ptr(tile.output.int_ptr, retain=True)
        kernel(tile.queue, (tile.count,), None, x, y, np.uint64(tile.count),
               wait_for=tile.wait_for)

    np.testing.assert_array_equal(
        clbuf.stream_tiles(bm, data, enqueue_only, tile_elements=TILE), 2 * data + 1)

    def copy(tile):  # a clbuf.Future: a device copy of the tile, input to output
        return bm.copy_async(tile.input, tile.output, tile.count * 4, wait_for=tile.wait_for)

    np.testing.assert_array_equal(
        clbuf.stream_tiles(bm, data, copy, tile_elements=TILE, in_flight=2), data)


@pytest.mark.parametrize("in_flight", [1, 2, 3])
@pytest.mark.parametrize("in_place", [False, True], ids=["out_of_place", "in_place"])
def test_a_function_raising_at_tile_k_stops_the_stream_there(shared, in_flight, in_place):
    bm, program = shared
    tiles, k = 10, 4
    data = data_of(np.float64, tiles * TILE)
    original = data.copy()
    out = data if in_place else np.full_like(data, -7.0)
    before = out.copy()
    kernel = affine(program, np.float64)
    calls = []

    def fn(tile):
        calls.append(tile.index)
        if tile.index == k:
            raise ValueError("boom at the fourth")
        return kernel(tile)

    with pytest.raises(clbuf.Error) as error:
        clbuf.stream_tiles(bm, data, fn, out=out, tile_elements=TILE, in_flight=in_flight)
    message = str(error.value)
    assert message.startswith(
        f"stream_tiles: tile {k} of {tiles} (elements {k * TILE} to {(k + 1) * TILE} of "
        f"{tiles * TILE}): the function threw: ValueError: boom at the fourth"), message
    assert isinstance(error.value.__cause__, ValueError)
    assert calls == list(range(k + 1))
    np.testing.assert_array_equal(out[:k * TILE], 2 * original[:k * TILE] + 1)
    np.testing.assert_array_equal(out[k * TILE:], before[k * TILE:])
    # the manager works on afterwards
    np.testing.assert_array_equal(
        clbuf.stream_tiles(bm, original, kernel, tile_elements=TILE), 2 * original + 1)


def test_a_clbuf_error_in_the_function_keeps_its_code_and_a_bad_result_is_refused(shared):
    bm, program = shared
    data = data_of(np.float32, 3 * TILE)

    def bad_fill(tile):
        if tile.index == 1:
            bm.fill(tile.input, 1e300)  # float32 cannot hold it: clbuf.Error
        return None

    with pytest.raises(clbuf.Error, match=r"^stream_tiles: tile 1 of 3 .*fill") as error:
        clbuf.stream_tiles(bm, data, bad_fill, tile_elements=TILE)
    assert isinstance(error.value.__cause__, clbuf.Error)

    with pytest.raises(clbuf.Error, match=r"^stream_tiles: tile 0 of 3 .*the function returned "
                                          r"42 \(int\)") as error:
        clbuf.stream_tiles(bm, data, lambda tile: 42, tile_elements=TILE)
    assert error.value.code == -58  # CL_INVALID_EVENT


def test_bad_arguments_are_refused_before_anything_runs(shared):
    bm, program = shared
    data = data_of(np.float32, 100)
    calls = []

    def fn(tile):
        calls.append(tile)

    with pytest.raises(clbuf.Error, match=r"fn must be callable"):
        clbuf.stream_tiles(bm, data, 3)
    with pytest.raises(clbuf.Error, match=r"out holds 99 elements, data 100"):
        clbuf.stream_tiles(bm, data, fn, out=np.zeros(99, np.float32))
    with pytest.raises(clbuf.Error, match=r"dtype is for a new output array"):
        clbuf.stream_tiles(bm, data, fn, out=np.zeros(100, np.float32), dtype=np.float64)
    with pytest.raises(clbuf.Error, match=r"in_flight 65 is above 64"):
        clbuf.stream_tiles(bm, data, fn, in_flight=65)
    with pytest.raises(clbuf.Error, match=r"holds no tile"):
        clbuf.stream_tiles(bm, data, fn, memory_budget_bytes=4)
    with pytest.raises(clbuf.Error, match=r"data is read-only"):
        ro = data.copy()
        ro.flags.writeable = False
        clbuf.stream_tiles(bm, ro, fn, out=ro)
    assert calls == []


def test_overlapping_arrays_that_are_not_one_are_refused(shared):
    bm, _ = shared
    base = np.zeros(101, np.float32)
    with pytest.raises(clbuf.Error, match=r"share bytes but are not one array") as error:
        clbuf.stream_tiles(bm, base[:-1], lambda tile: None, out=base[1:])
    assert error.value.code == -8


def test_plan_tiles_is_the_plan_the_stream_follows(shared):
    bm, program = shared
    plan = clbuf.plan_tiles(bm, 10 * TILE + 1, np.float32, tile_elements=TILE, in_flight=2)
    assert plan["tile_elements"] == TILE and plan["tiles"] == 11 and plan["in_flight"] == 2
    assert plan["device_bytes"] == TILE * 8 * 2  # in and out, two tiles in flight
    in_place = clbuf.plan_tiles(bm, 10 * TILE, np.float32, in_place=True, tile_elements=TILE,
                                in_flight=2)
    assert in_place["device_bytes"] == TILE * 4 * 2
    wide = clbuf.plan_tiles(bm, 10 * TILE, np.float32, np.float64, tile_elements=TILE)
    assert wide["device_bytes"] == TILE * 12 * wide["in_flight"]
    automatic = clbuf.plan_tiles(bm, 1 << 20, np.float32, memory_budget_bytes=3 << 20)
    assert automatic["tile_elements"] * 8 * automatic["in_flight"] <= 3 << 20
    assert automatic["budget_bytes"] == 3 << 20
    seen = []
    data = data_of(np.float32, 1 << 16)
    out = clbuf.stream_tiles(bm, data, affine(program, np.float32, seen),
                             memory_budget_bytes=1 << 16)
    planned = clbuf.plan_tiles(bm, data.size, np.float32, memory_budget_bytes=1 << 16)
    assert len(seen) == planned["tiles"] and seen[0][3] == planned["tile_elements"]
    np.testing.assert_array_equal(out, 2 * data + 1)
    with pytest.raises(clbuf.Error, match=r"in_place=True streams one array"):
        clbuf.plan_tiles(bm, 10, np.float32, np.float64, in_place=True)
    with pytest.raises(clbuf.Error, match=r"exceed memory_budget_bytes"):
        clbuf.plan_tiles(bm, 10, np.float32, tile_elements=1000, memory_budget_bytes=4000)


def test_a_device_group_deals_the_tiles_to_its_devices(shared):
    bm, program = shared
    # A second manager on the same context (its own queue): a group of two whose tiles one
    # pyopencl program serves.
    context = cl.Context.from_int_ptr(bm.context_int_ptr)
    second = clbuf.BufferManager.from_pyopencl(cl.CommandQueue(context))
    group = clbuf.DeviceGroup([bm, second])
    try:
        data = data_of(np.float32, 9 * TILE + 5)
        kernel = affine(program, np.float32)
        devices = []

        def fn(tile):
            devices.append(tile.device)
            assert tile.input.int_ptr != 0 and tile.queue.context.int_ptr == bm.context_int_ptr
            return kernel(tile)

        out = clbuf.stream_tiles(group, data, fn, tile_elements=TILE, in_flight=2)
        np.testing.assert_array_equal(out, 2 * data + 1)
        assert devices == [k % 2 for k in range(10)]  # even: round robin
        devices.clear()
        copy = data.copy()
        clbuf.stream_tiles(group, copy, fn, out=copy, weights=[3, 1], tile_elements=TILE)
        np.testing.assert_array_equal(copy, 2 * data + 1)
        assert devices.count(0) > devices.count(1) > 0
        plan = clbuf.plan_tiles(group, data.size, np.float32, tile_elements=TILE, in_flight=2)
        assert plan["tiles"] == 10 and plan["in_flight"] == 2
        assert clbuf.plan_tiles(group, data.size, np.float32, weights=[1, 0],
                                tile_elements=TILE)["tiles"] == 10

        def raising(tile):
            if tile.index == 3:
                raise RuntimeError("no")
            return kernel(tile)

        out = np.zeros_like(data)
        with pytest.raises(clbuf.Error, match=r"^stream_tiles: tile 3 of 10 .*RuntimeError: no"):
            clbuf.stream_tiles(group, data, raising, out=out, tile_elements=TILE)
        np.testing.assert_array_equal(out[:3 * TILE], 2 * data[:3 * TILE] + 1)
        assert not out[3 * TILE:].any()
        with pytest.raises(clbuf.Error, match=r"weights"):
            clbuf.stream_tiles(group, data, fn, weights=[1, 2, 3])
        with pytest.raises(clbuf.Error, match=r"weights deal the tiles to a DeviceGroup"):
            clbuf.stream_tiles(bm, data, fn, weights=[1])
        with pytest.raises(clbuf.Error, match=r"a clbuf\.BufferManager or a clbuf\.DeviceGroup"):
            clbuf.stream_tiles("bm", data, fn)
    finally:
        second.cleanup()
