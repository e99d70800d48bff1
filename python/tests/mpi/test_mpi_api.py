# SPDX-License-Identifier: MIT
"""clbuf.mpi beyond the basics, with mpi4py: non-blocking collectives, scatter and gather,
persistent requests, halo exchanges (contiguous and boxes by cartesian_faces), Communicator
options and errors. Run by `mpirun -np 2 python3 -m pytest python/tests/mpi` (ctest
python.mpi_np2); every test is collective. Results are exact against numpy references."""
import itertools

import numpy as np
import pytest

import clbuf
import clbuf._clbuf

MPI = pytest.importorskip("mpi4py.MPI")
if not hasattr(clbuf._clbuf, "_MpiCommunicator"):
    pytest.skip("this clbuf extension was built without MPI (none was found when it was built)",
                allow_module_level=True)
import clbuf.mpi  # noqa: E402

DTYPES = [np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
          np.uint32, np.uint64]


def all_ok(ok):
    """Every rank's verdict, so that one rank's failure fails the test on every rank."""
    return MPI.COMM_WORLD.allreduce(bool(ok), op=MPI.LAND)


def test_constants_match_mpi4py():
    assert clbuf.mpi.PROC_NULL == MPI.PROC_NULL
    assert clbuf.mpi.ANY_SOURCE == MPI.ANY_SOURCE
    assert clbuf.mpi.ANY_TAG == MPI.ANY_TAG


def test_ibroadcast_and_iallreduce_in_flight_together(world):
    bm, comm = world
    n = 37
    requests, checks = [], []
    for i, dtype in enumerate(DTYPES):
        root = i % comm.size
        b = bm.upload_to_device(
            (np.arange(n) * 3 + i).astype(dtype) if comm.rank == root else np.zeros(n, dtype))
        requests.append(comm.ibroadcast(b, root))
        checks.append((b, (np.arange(n) * 3 + i).astype(dtype)))
        s = bm.upload_to_device((np.arange(n) % 5 + comm.rank + 1).astype(dtype))
        requests.append(comm.iallreduce(s))
        checks.append((s, sum((np.arange(n) % 5 + r + 1) for r in range(comm.size)).astype(dtype)))
        m = bm.upload_to_device((np.arange(n) + 7 * comm.rank).astype(dtype))
        requests.append(comm.iallreduce(m, op="max"))
        checks.append((m, (np.arange(n) + 7 * (comm.size - 1)).astype(dtype)))
        lo = bm.upload_to_device((np.arange(n) + 7 * comm.rank).astype(dtype))
        requests.append(comm.iallreduce(lo, "min"))
        checks.append((lo, np.arange(n).astype(dtype)))
    while not all([r.test() for r in requests]):
        pass
    for r in requests:
        r.wait()
        assert r.test()
    for buf, expected in checks:
        got = bm.download_from_device(buf)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


def test_iallreduce_request_keeps_its_buffer(world):
    bm, comm = world
    r = comm.iallreduce(bm.upload_to_device(np.full(1000, comm.rank + 1, np.int32)))
    import gc
    gc.collect()  # the buffer has no other reference
    r.wait()


@pytest.mark.parametrize("dtype", [np.float64, np.int16, np.uint8])
def test_scatter_and_gather_every_root(world, dtype):
    bm, comm = world
    n = 11
    for root in range(comm.size):
        everything = (np.arange(n * comm.size) * 2 + root).astype(dtype)
        mine = bm.empty(n, dtype)
        # `all` is read on the root only: None elsewhere on even roots, a buffer on odd ones
        if comm.rank == root:
            source = bm.upload_to_device(everything)
        else:
            source = None if root % 2 == 0 else bm.empty(1, dtype)
        comm.scatter(source, mine, root)
        np.testing.assert_array_equal(bm.download_from_device(mine),
                                      everything[comm.rank * n:(comm.rank + 1) * n])

        part = bm.upload_to_device((np.arange(n) + 100 * comm.rank + root).astype(dtype))
        whole = bm.upload_to_device(np.zeros(n * comm.size, dtype)) if comm.rank == root else None
        comm.gather(part, whole, root)
        if comm.rank == root:
            expected = np.concatenate(
                [(np.arange(n) + 100 * r + root).astype(dtype) for r in range(comm.size)])
            np.testing.assert_array_equal(bm.download_from_device(whole), expected)


def test_scatter_errors(world):
    bm, comm = world
    mine = bm.empty(4, np.float32)
    with pytest.raises(clbuf.Error) as info:
        comm.scatter(bm.empty(4 * comm.size, np.float64), mine, 0)
    assert info.value.code == -30 and "all holds float64 but mine holds float32" in str(info.value)


def test_persistent_ring_reused_200_times(world):
    bm, comm = world
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    n = 257
    out = bm.empty(n, np.float64)
    into = bm.empty(n, np.float64)
    send = comm.send_init(out, right, tag=5)
    recv = comm.recv_init(into, left, tag=5)
    assert not send.active and not recv.active and send.test() and recv.test()
    for i in range(200):
        bm.upload_into(out, np.arange(n, dtype=np.float64) * (i + 1) + comm.rank * 1000.0)
        recv.start()
        send.start()
        assert recv.active
        if i % 2:
            while not (send.test() & recv.test()):
                pass
        else:
            send.wait()
            recv.wait()
        assert not send.active and not recv.active
        np.testing.assert_array_equal(bm.download_from_device(into),
                                      np.arange(n, dtype=np.float64) * (i + 1) + left * 1000.0)


def test_persistent_start_while_active(world):
    bm, comm = world
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    out = bm.upload_to_device(np.full(8, comm.rank, np.int64))
    into = bm.empty(8, np.int64)
    recv = comm.recv_init(into, left, tag=9)
    send = comm.send_init(out, right, tag=9)
    recv.start()
    with pytest.raises(clbuf.Error) as info:
        recv.start()
    assert info.value.code == -59 and "started again" in str(info.value)
    assert str(info.value).startswith("Persistent.start: CL_INVALID_OPERATION (-59): ")
    send.start()
    send.wait()
    recv.wait()
    np.testing.assert_array_equal(bm.download_from_device(into), np.full(8, left))


def test_persistent_errors(world):
    bm, comm = world
    buf = bm.empty(4, np.float32)
    with pytest.raises(clbuf.Error) as info:
        comm.send_init(buf, comm.size, tag=0)
    assert info.value.code == -30 and "destination rank" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        comm.recv_init(buf, 0, tag=-5)
    assert info.value.code == -30 and "tag -5" in str(info.value)


def ring_plan(comm, n, h):
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    return [clbuf.mpi.Neighbour(left, send_offset=h, recv_offset=0, count=h, send_tag=1,
                                recv_tag=2),
            clbuf.mpi.Neighbour(right, send_offset=n, recv_offset=n + h, count=h, send_tag=2,
                                recv_tag=1)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_halo_exchange_1d_contiguous_ring(world, dtype):
    bm, comm = world
    n, h = 50, 3
    size = comm.size
    halo = clbuf.mpi.HaloExchange(comm, ring_plan(comm, n, h))
    for step in range(3):
        def cells(first, count):
            return ((np.arange(first, first + count) % (size * n)) % 100 + step).astype(dtype)
        local = np.zeros(n + 2 * h, dtype)
        local[h:h + n] = cells(comm.rank * n, n)
        field = bm.upload_to_device(local)
        halo.start(field)
        assert halo.active
        del field  # the exchange keeps it alive
        if step == 1:
            while not halo.test():
                pass
        else:
            halo.finish()
        assert not halo.active
    # the last field: gone from Python, so check through a fresh exchange with a kept field
    local = np.zeros(n + 2 * h, dtype)
    local[h:h + n] = ((np.arange(comm.rank * n, comm.rank * n + n) % (size * n)) % 100
                      ).astype(dtype)
    field = bm.upload_to_device(local)
    halo.start(field)
    halo.finish()
    expected = ((np.arange(comm.rank * n - h, comm.rank * n + n + h) % (size * n)) % 100
                ).astype(dtype)
    np.testing.assert_array_equal(bm.download_from_device(field), expected)


def test_halo_exchange_proc_null_and_dtype_given(world):
    bm, comm = world
    n, h = 20, 2
    plan = ring_plan(comm, n, h)
    plan[0].rank = MPI.PROC_NULL  # mpi4py's value passes straight through
    plan[1].rank = MPI.PROC_NULL
    halo = clbuf.mpi.HaloExchange(comm, plan, dtype=np.int32)
    local = np.full(n + 2 * h, -1, np.int32)
    local[h:h + n] = np.arange(n)
    field = bm.upload_to_device(local)
    halo.start(field)
    halo.finish()
    np.testing.assert_array_equal(bm.download_from_device(field), local)


def expected_block(coords, dims, periods, interior, h, edges, value, sentinel):
    """The local field (numpy shape z, y, x) after the exchange: interior cells value(g),
    ghosts the neighbour's interior (wrapped where periodic), sentinel where closed or beyond
    an edge/corner the plan does not cover."""
    ndims = len(dims)
    extent = [interior[d] + 2 * h if d < ndims else 1 for d in range(3)]
    out = np.empty(extent[::-1], np.float64)
    for z, y, x in itertools.product(*(range(e) for e in extent[::-1])):
        local = (x, y, z)
        ghost_axes = 0
        g = [0, 0, 0]
        closed = False
        for d in range(ndims):
            i = local[d] - h
            if i < 0 or i >= interior[d]:
                ghost_axes += 1
            gi = coords[d] * interior[d] + i
            total = dims[d] * interior[d]
            if gi < 0 or gi >= total:
                if periods[d]:
                    gi %= total
                else:
                    closed = True
            g[d] = gi
        if closed or (ghost_axes > 1 and not edges):
            out[z, y, x] = sentinel
        else:
            out[z, y, x] = value(*g)
    return out


CART_CASES = [(ndims, periodic, edges, h)
              for ndims in (2, 3) for periodic in (True, False) for edges in (False, True)
              for h in (1, 2)]


@pytest.mark.parametrize("ndims,periodic,edges,h", CART_CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_halo_exchange_cartesian_boxes(world, ndims, periodic, edges, h, dtype):
    bm, _ = world
    size = MPI.COMM_WORLD.Get_size()
    dims = MPI.Compute_dims(size, ndims)
    periods = [periodic] * ndims
    if not periodic and ndims == 2:
        periods = [False, True]  # closed along x, periodic along y
    cart = MPI.COMM_WORLD.Create_cart(dims, periods=periods, reorder=False)
    try:
        comm = clbuf.mpi.Communicator(bm, cart)
        interior = (5, 4, 3)[:ndims]
        plan = clbuf.mpi.cartesian_faces(cart, interior, h, edges_and_corners=edges,
                                         first_tag=10)
        assert len(plan) == (3 ** ndims - 1 if edges else 2 * ndims)
        assert all(isinstance(n, clbuf.mpi.Neighbour) and isinstance(n.send_box, clbuf.mpi.Box)
                   for n in plan)
        coords = cart.Get_coords(cart.Get_rank())

        def value(x, y, z):
            return 1 + x + 100 * y + 10000 * z

        sentinel = -7
        full = [interior[d] + 2 * h if d < ndims else 1 for d in range(3)]
        local = np.full(full[::-1], sentinel, np.float64)
        inner = tuple(slice(h, h + interior[d]) if d < ndims else slice(0, 1)
                      for d in range(3))[::-1]
        zz, yy, xx = np.meshgrid(*(np.arange(full[d])[::-1][::-1] for d in (2, 1, 0)),
                                 indexing="ij")
        gx = coords[0] * interior[0] + xx - h
        gy = (coords[1] * interior[1] + yy - h) if ndims > 1 else yy
        gz = (coords[2] * interior[2] + zz - h) if ndims > 2 else zz
        local[inner] = value(gx, gy, gz)[inner]
        field = bm.upload_to_device(local.astype(dtype))
        halo = clbuf.mpi.HaloExchange(comm, plan)
        for _ in range(2):  # reused: the second exchange finds the same cells
            halo.start(field)
            halo.finish()
        got = bm.download_from_device(field).reshape(full[::-1])
        expected = expected_block(coords, dims, periods, interior, h, edges, value, sentinel)
        ok = np.array_equal(got, expected.astype(dtype))
        if not ok:
            bad = np.argwhere(got != expected.astype(dtype))
            print(f"rank {cart.Get_rank()}: {len(bad)} cells differ, first {bad[0]}")
        assert all_ok(ok)
        comm.barrier()
    finally:
        cart.Free()


def test_halo_exchange_errors(world):
    bm, comm = world
    n, h = 16, 2
    halo = clbuf.mpi.HaloExchange(comm, ring_plan(comm, n, h))
    with pytest.raises(clbuf.Error) as info:
        halo.start(bm.empty(n + 2 * h, np.complex64))
    assert info.value.code == -30 and "complex64" in str(info.value) \
        and "HaloExchange" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.HaloExchange(comm, ring_plan(comm, n, h), dtype=np.float16)
    assert info.value.code == -30 and "float16" in str(info.value)

    # a box past its field's extents along x: named by the library, nothing sent
    bad = [clbuf.mpi.Neighbour(0, send_box=clbuf.mpi.Box((3, 0, 0), (2, 1, 1), (4, 1, 1)),
                               recv_box=clbuf.mpi.Box((0, 0, 0), (2, 1, 1), (4, 1, 1)))]
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.HaloExchange(comm, bad, dtype=np.float32)
    assert info.value.code == -30 and "send box" in str(info.value) \
        and "along x" in str(info.value), str(info.value)
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.HaloExchange(comm, [clbuf.mpi.Neighbour(0, send_box=((0, 0, 0), (1, 1, 1)))])
    assert info.value.code == -30 and "plan[0].send_box" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.HaloExchange(comm, [clbuf.mpi.Neighbour(0, send_box=clbuf.mpi.Box(
            (0, 0), (1, 1, 1), (1, 1, 1)))])
    assert info.value.code == -30 and "plan[0].send_box.origin" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.HaloExchange(comm, [object()])
    assert info.value.code == -30 and "plan[0] must be a clbuf.mpi.Neighbour" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.HaloExchange(comm, [clbuf.mpi.Neighbour(comm.size + 3)], dtype=np.int8)
    assert info.value.code == -30 and "neighbour rank" in str(info.value)
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.HaloExchange(object(), [])
    assert info.value.code == -30
    with pytest.raises(clbuf.Error) as info:  # ranges past the field's end
        halo.start(bm.empty(n, np.float32))
    assert info.value.code == -30
    assert not halo.active

    # start twice: refused, the exchange in flight finishes normally
    local = np.arange(n + 2 * h, dtype=np.float32)
    field = bm.upload_to_device(local)
    halo.start(field)
    with pytest.raises(clbuf.Error) as info:
        halo.start(field)
    assert info.value.code == -59 and "not finished" in str(info.value)
    assert str(info.value).startswith("HaloExchange.start: CL_INVALID_OPERATION (-59): ")
    halo.finish()
    assert halo.test()
    got = bm.download_from_device(field)
    np.testing.assert_array_equal(got[h:n + h], local[h:n + h])
    np.testing.assert_array_equal(got[:h], local[n:n + h])  # every rank has the same data
    comm.barrier()


def test_cartesian_faces_errors(world):
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.cartesian_faces(MPI.COMM_WORLD, (4, 4), 1)
    assert info.value.code == -30 and "Cartesian" in str(info.value), str(info.value)
    cart = MPI.COMM_WORLD.Create_cart([MPI.COMM_WORLD.Get_size()], periods=[True])
    try:
        with pytest.raises(clbuf.Error) as info:
            clbuf.mpi.cartesian_faces(cart, 4, 0)
        assert info.value.code == -30 and "halo width is 0" in str(info.value)
        with pytest.raises(clbuf.Error) as info:
            clbuf.mpi.cartesian_faces(cart, (4, 2), 1)
        assert info.value.code == -30 and "must be 1" in str(info.value)
        with pytest.raises(clbuf.Error) as info:
            clbuf.mpi.cartesian_faces("cart", 4, 1)
        assert info.value.code == -30 and "mpi4py.MPI.Comm" in str(info.value)
        plan = clbuf.mpi.cartesian_faces(cart, 6, 2, first_tag=3)
        size, rank = cart.Get_size(), cart.Get_rank()
        assert [n.rank for n in plan] == [(rank - 1) % size, (rank + 1) % size]
        assert plan[0] == clbuf.mpi.Neighbour(
            (rank - 1) % size, 0, 0, 0, 3 + 0 + 3 + 9, 3 + 2 + 3 + 9,  # (dx+1) + 3 (dy+1) + 9 (dz+1)
            clbuf.mpi.Box((2, 0, 0), (2, 1, 1), (10, 1, 1)),
            clbuf.mpi.Box((0, 0, 0), (2, 1, 1), (10, 1, 1)))
    finally:
        cart.Free()


def test_options(world):
    bm, _ = world
    comm = clbuf.mpi.Communicator(bm, MPI.COMM_WORLD, chunk_bytes=4096, depth=3, path="staged",
                                  device_reduce_bytes=1 << 30, verify_collectives=False)
    assert comm.options == {"chunk_bytes": 4096, "depth": 3, "path": "staged",
                            "device_reduce_bytes": 1 << 30, "verify_collectives": False}
    assert clbuf.mpi.Communicator(bm).options["path"] == "automatic"
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    data = np.arange(50000, dtype=np.float32) + comm.rank  # many 4 KiB chunks
    into = bm.empty(50000, np.float32)
    comm.sendrecv(bm.upload_to_device(data), right, into, left)
    np.testing.assert_array_equal(bm.download_from_device(into),
                                  np.arange(50000, dtype=np.float32) + left)
    for bad, word in [(dict(chunk_bytes=1), "chunk"), (dict(path="fast"), "path must be"),
                      (dict(depth=-1), "depth"), (dict(verify_collectives=1), "bool")]:
        with pytest.raises(clbuf.Error) as info:
            clbuf.mpi.Communicator(bm, MPI.COMM_WORLD, **bad)
        assert info.value.code == -30 and word in str(info.value), str(info.value)


def test_path_whole_talks_to_plain_mpi4py(world):
    bm, _ = world
    comm = clbuf.mpi.Communicator(bm, MPI.COMM_WORLD, path="whole")
    world_comm = MPI.COMM_WORLD
    data = np.arange(100, dtype=np.float64) * 1.5
    if comm.rank == 0:
        comm.send(bm.upload_to_device(data), 1, tag=21)
    elif comm.rank == 1:
        got = np.empty(100, np.float64)
        world_comm.Recv(got, source=0, tag=21)
        np.testing.assert_array_equal(got, data)
    world_comm.Barrier()


def test_ranks_tags_and_counts_take_no_float(world):
    # Issue 35: every number clbuf.mpi takes is an integer (operator.index); a float, numpy's
    # too, is refused (it was truncated where pybind11 converted it: first_tag), and the error
    # names the call. Each call below fails on every rank before it sends anything.
    bm, comm = world
    buf = bm.upload_to_device(np.arange(4, dtype=np.float32))
    cart = MPI.COMM_WORLD.Create_cart([MPI.COMM_WORLD.Get_size()], periods=[True])
    try:
        calls = {
            "send": lambda v: comm.send(buf, v),
            "recv": lambda v: comm.recv(buf, 0, tag=v),
            "isend": lambda v: comm.isend(buf, v),
            "broadcast": lambda v: comm.broadcast(buf, v),
            "scatter": lambda v: comm.scatter(None, buf, v),
            "cartesian_faces": lambda v: clbuf.mpi.cartesian_faces(cart, 6, 1, first_tag=v),
            "HaloExchange": lambda v: clbuf.mpi.HaloExchange(
                comm, [clbuf.mpi.Neighbour(v, count=1)]),
            "Communicator": lambda v: clbuf.mpi.Communicator(bm, MPI.COMM_WORLD, depth=v),
        }
        for name, call in calls.items():
            for value in (1.0, np.float32(1.0), np.float64(1.5)):
                with pytest.raises(clbuf.Error) as info:
                    call(value)
                assert info.value.code == -30, str(info.value)
                assert str(info.value).startswith(f"{name}: CL_INVALID_VALUE (-30): "), \
                    str(info.value)
                assert "must be an integer" in str(info.value), str(info.value)
    finally:
        cart.Free()
    comm.barrier()
