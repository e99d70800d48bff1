# SPDX-License-Identifier: MIT
"""clbuf.load and clbuf.save (issue 44): .npy files straight to and from device memory, as
np.load and np.save are for host memory; numpy reads what clbuf writes and the other way round,
every numeric dtype, both byte orders, shapes from () to 3-D; errors name the path."""
import os

import numpy as np
import pytest

import clbuf

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def values(dtype, shape):
    count = int(np.prod(shape, dtype=np.int64))
    i = np.arange(count, dtype=np.int64)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        data = (i % 3) == 0
    elif dt.kind == "c":
        data = ((i * 7 + 3) % 251) - 1j * (i % 13)
    else:
        data = (i * 7 + 3) % 251
    return data.astype(dt).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (1000,), (3, 5, 7)])
def test_round_trips_through_numpy_both_ways(bm, tmp_path, dtype, shape):
    expected = values(dtype, shape)
    ours = str(tmp_path / "ours.npy")
    clbuf.save(ours, bm.upload_to_device(expected))
    theirs = np.load(ours)
    assert theirs.dtype == expected.dtype and theirs.shape == expected.shape
    assert np.array_equal(theirs, expected)
    numpys = str(tmp_path / "numpys.npy")
    np.save(numpys, expected)
    loaded = clbuf.load(numpys, bm)
    assert loaded.dtype == expected.dtype and loaded.shape == expected.shape
    assert np.array_equal(bm.download_from_device(loaded), expected)


@pytest.mark.parametrize("dtype", ["int16", "float32", "float64", "complex64"])
def test_loads_big_endian_files_in_the_hosts_order(bm, tmp_path, dtype):
    expected = values(dtype, (4, 6))
    path = str(tmp_path / "be.npy")
    np.save(path, expected.astype(expected.dtype.newbyteorder(">")))
    loaded = clbuf.load(path, bm)
    assert loaded.dtype == expected.dtype
    assert np.array_equal(bm.download_from_device(loaded), expected)


def test_a_scalar_and_a_view(bm, tmp_path):
    path = str(tmp_path / "scalar.npy")
    np.save(path, np.float64(2.5))
    loaded = clbuf.load(path, bm)
    assert loaded.shape == ()
    whole = bm.upload_to_device(np.arange(100, dtype=np.int32).reshape(10, 10))
    clbuf.save(path, whole[2:5])
    assert np.array_equal(np.load(path), np.arange(20, 50, dtype=np.int32).reshape(3, 10))


def test_replaces_a_file_whole_and_leaves_nothing_else(bm, tmp_path):
    path = tmp_path / "a.npy"
    path.write_bytes(b"old")
    clbuf.save(str(path), bm.upload_to_device(np.ones(1000)))
    assert os.listdir(tmp_path) == ["a.npy"]
    assert np.array_equal(np.load(path), np.ones(1000))


def test_errors_name_the_path(bm, tmp_path):
    missing = str(tmp_path / "missing.npy")
    with pytest.raises(clbuf.Error, match="load.*missing.npy.*No such file"):
        clbuf.load(missing, bm)
    with pytest.raises(clbuf.Error, match="is a folder"):
        clbuf.load(str(tmp_path), bm)
    fortran = str(tmp_path / "fortran.npy")
    np.save(fortran, np.asfortranarray(np.ones((3, 4))))
    with pytest.raises(clbuf.Error, match="Fortran order"):
        clbuf.load(fortran, bm)
    text = str(tmp_path / "text.npy")
    np.save(text, np.array(["a", "b"]))
    with pytest.raises(clbuf.Error, match="<U1"):
        clbuf.load(text, bm)
    cut = tmp_path / "cut.npy"
    np.save(cut, np.ones(100))
    cut.write_bytes(cut.read_bytes()[:-1])
    with pytest.raises(clbuf.Error, match="truncated"):
        clbuf.load(str(cut), bm)
    with pytest.raises(clbuf.Error, match="save.*No such file"):
        clbuf.save(str(tmp_path / "no" / "a.npy"), bm.upload_to_device(np.ones(3)))
    with pytest.raises(clbuf.Error):
        clbuf.save(str(tmp_path / "x.npy"), "not a buffer")
