# SPDX-License-Identifier: MIT
"""clbuf.mpi with mpi4py, run by `mpirun -np 2 python3 -m pytest python/tests/mpi` (ctest
python.mpi_np2, label mpi). Every test is collective: both ranks run it."""
import numpy as np
import pytest

import clbuf
import clbuf._clbuf

MPI = pytest.importorskip("mpi4py.MPI")
if not hasattr(clbuf._clbuf, "_MpiCommunicator"):
    pytest.skip("this clbuf extension was built without MPI (none was found when it was built)",
                allow_module_level=True)
import clbuf.mpi  # noqa: E402


def test_rank_and_size(world):
    bm, comm = world
    assert comm.rank == MPI.COMM_WORLD.Get_rank() and comm.size == MPI.COMM_WORLD.Get_size()


def test_send_recv_and_views(world):
    bm, comm = world
    data = np.arange(1000, dtype=np.float32) * (comm.rank + 1)
    if comm.rank == 0:
        comm.send(bm.upload_to_device(data)[3:503], 1, tag=7)
    elif comm.rank == 1:
        got = bm.empty(500, np.float32)
        comm.recv(got, 0, tag=7)
        np.testing.assert_array_equal(bm.download_from_device(got), np.arange(3, 503) * 1.0)


def test_sendrecv_ring_and_nonblocking(world):
    bm, comm = world
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    out = bm.upload_to_device(np.full(64, comm.rank, np.int32))
    into = bm.empty(64, np.int32)
    comm.sendrecv(out, right, into, left)
    np.testing.assert_array_equal(bm.download_from_device(into), np.full(64, left))
    into2 = bm.empty(64, np.int32)
    recv = comm.irecv(into2, left, tag=3)
    send = comm.isend(out, right, tag=3)
    send.wait()
    recv.wait()
    assert recv.test()
    np.testing.assert_array_equal(bm.download_from_device(into2), np.full(64, left))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.int64])
def test_broadcast_and_allreduce(world, dtype):
    bm, comm = world
    buf = bm.upload_to_device(np.full(100, comm.rank + 1, dtype))
    comm.allreduce(buf, "sum")
    total = sum(range(1, comm.size + 1))
    np.testing.assert_array_equal(bm.download_from_device(buf), np.full(100, total, dtype))
    buf2 = bm.upload_to_device(np.arange(10, dtype=dtype) + comm.rank)
    comm.allreduce(buf2, op="max")
    np.testing.assert_array_equal(bm.download_from_device(buf2),
                                  np.arange(10, dtype=dtype) + comm.size - 1)
    root = bm.upload_to_device(np.full(33, 5 if comm.rank == 0 else 0, dtype))
    comm.broadcast(root, 0)
    np.testing.assert_array_equal(bm.download_from_device(root), np.full(33, 5, dtype))


def test_bad_input(world):
    bm, comm = world
    buf = bm.upload_to_device(np.zeros(4, np.float32))
    with pytest.raises(clbuf.Error) as info:
        comm.allreduce(buf, "prod")
    assert info.value.code == -30 and "op must be" in str(info.value)
    with pytest.raises(clbuf.Error):
        comm.send(buf, 99)
    with pytest.raises(clbuf.Error) as info:
        clbuf.mpi.Communicator(bm, "world")
    assert "mpi4py.MPI.Comm" in str(info.value)
    with pytest.raises(clbuf.Error):
        comm.allreduce(bm.upload_to_device(np.zeros(4, np.complex64)))


def test_a_message_carries_its_element_type(world):
    # A float32 message received into an int32 buffer of the same bytes is an error naming both
    # types on the receiver (nothing written), never the bits reinterpreted; sizes in elements.
    bm, comm = world
    if comm.rank == 0:
        comm.send(bm.upload_to_device(np.array([1.0, 2.0], np.float32)), 1, tag=11)
        comm.send(bm.upload_to_device(np.arange(10, dtype=np.float32)), 1, tag=12)
        comm.send(bm.upload_to_device(np.arange(4, dtype=np.int16)), 1, tag=13)
    elif comm.rank == 1:
        into = bm.upload_to_device(np.full(2, 7, np.int32))
        with pytest.raises(clbuf.Error) as info:
            comm.recv(into, 0, tag=11)
        assert info.value.code == -30 and "(float)" in str(info.value) \
            and "(int32)" in str(info.value), str(info.value)
        np.testing.assert_array_equal(bm.download_from_device(into), [7, 7])
        with pytest.raises(clbuf.Error) as info:
            comm.recv(bm.empty(8, np.float32), 0, tag=12)
        assert "10 elements of 4 bytes" in str(info.value) and "8 elements" in str(info.value)
        got = bm.empty(4, np.int16)  # the same type: exact
        comm.recv(got, 0, tag=13)
        np.testing.assert_array_equal(bm.download_from_device(got), np.arange(4))


def test_ranks_tags_and_roots_that_are_not_c_ints_are_clbuf_errors(world):
    bm, comm = world
    buf = bm.empty(1, np.float32)
    for call in (lambda: comm.send(buf, 1 - comm.rank, tag=2**40),
                 lambda: comm.send(buf, "1"),
                 lambda: comm.send(buf, 1.0),
                 lambda: comm.isend(buf, None),
                 lambda: comm.recv(buf, 2**40),
                 lambda: comm.broadcast(buf, 2**40)):
        with pytest.raises(clbuf.Error) as info:
            call()
        assert info.value.code == -30, str(info.value)


def test_a_type_mismatch_in_allreduce_names_this_ranks_type(world):
    bm, comm = world
    dtype = np.float64 if comm.rank == 0 else np.int64
    with pytest.raises(clbuf.Error) as info:
        comm.allreduce(bm.upload_to_device(np.ones(5, dtype)))
    assert "this rank's: " + ("double" if comm.rank == 0 else "int64") in str(info.value)
