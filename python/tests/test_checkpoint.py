# SPDX-License-Identifier: MIT
"""clbuf.Checkpoint (issue 44 item 2, the Python form of clbuf::Checkpoint): DeviceBuffers of
every dtype and ShardedBuffers saved to a folder and loaded back bit for bit; numpy reads each
saved file; a flipped byte, a truncated file, another shape or dtype is refused with every buffer
unchanged; the Checkpoint keeps the buffers it was given alive."""
import gc
import os

import numpy as np
import pytest

import clbuf

RNG = np.random.default_rng(44)

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def random_array(shape, dtype):
    """Random bytes of `dtype` (NaN payloads too), which must come back bit for bit."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    return RNG.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(
        shape)


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_every_dtype_round_trips_and_numpy_reads_each_file(bm, tmp_path):
    folder = str(tmp_path / "ckpt")
    arrays = {f"a_{dtype}": random_array((3, 5), dtype) for dtype in DTYPES}
    arrays["empty"] = np.zeros(0, np.float32)
    arrays["one"] = np.array([7], np.int64)
    buffers = {name: bm.upload_to_device(a) for name, a in arrays.items()}
    ckpt = clbuf.Checkpoint(bm, folder)
    for name, buffer in buffers.items():
        assert ckpt.add(name, buffer) is ckpt
    assert ckpt.arrays == len(arrays)
    ckpt.save()
    for name, expected in arrays.items():
        assert same_bytes(np.load(os.path.join(folder, name + ".npy")), expected), name
    for name, buffer in buffers.items():  # overwritten, then loaded back
        if buffer.size:
            bm.fill(buffer, 0)
    ckpt.load()
    for name, expected in arrays.items():
        assert same_bytes(bm.download_from_device(buffers[name]), expected), name
    assert clbuf.Checkpoint.complete_folder(folder) == folder
    assert clbuf.Checkpoint.complete_folder(str(tmp_path / "none")) == ""


def test_a_second_checkpoint_loads_into_new_buffers_and_a_view(bm, tmp_path):
    folder = str(tmp_path / "ckpt")
    field = random_array((4, 6), np.float64)
    clbuf.Checkpoint(bm, folder).add("field", bm.upload_to_device(field)).save()
    whole = bm.upload_to_device(np.zeros((10, 6), np.float64))
    view = whole[2:6]
    clbuf.Checkpoint(bm, folder).add("field", view).load()
    back = bm.download_from_device(whole)
    assert same_bytes(back[2:6], field)
    assert not back[:2].any() and not back[6:].any()


def test_a_shape_given_to_add_is_the_files_and_must_hold_the_buffer(bm, tmp_path):
    folder = str(tmp_path / "ckpt")
    data = np.arange(12, dtype=np.int32)
    ckpt = clbuf.Checkpoint(bm, folder).add("grid", bm.upload_to_device(data), shape=(3, 4))
    ckpt.save()
    assert same_bytes(np.load(os.path.join(folder, "grid.npy")), data.reshape(3, 4))
    with pytest.raises(clbuf.Error, match=r"Checkpoint\.add: CL_INVALID_VALUE.*") as error:
        clbuf.Checkpoint(bm, folder).add("grid", bm.upload_to_device(data), shape=(5, 4))
    assert error.value.code == -30


def test_a_shape_or_dtype_other_than_the_files_is_refused_and_nothing_changes(bm, tmp_path):
    folder = str(tmp_path / "ckpt")
    clbuf.Checkpoint(bm, folder).add("x", bm.upload_to_device(np.ones(10, np.float32))).save()
    for other in (np.full(12, 5, np.float32), np.full(10, 5, np.int32)):
        buffer = bm.upload_to_device(other)
        with pytest.raises(clbuf.Error, match=r"Checkpoint\.load: .*x\.npy.*holds <f4 of shape") \
                as error:
            clbuf.Checkpoint(bm, folder).add("x", buffer).load()
        assert error.value.code == -30
        assert same_bytes(bm.download_from_device(buffer), other)


@pytest.mark.parametrize("victim", ["a.npy", "b.npy", "manifest"])
def test_a_flipped_byte_in_any_file_is_refused_with_every_buffer_unchanged(bm, tmp_path, victim):
    folder = str(tmp_path / "ckpt")
    a, b = random_array(1000, np.float32), random_array((20, 3), np.int16)
    clbuf.Checkpoint(bm, folder).add("a", bm.upload_to_device(a)).add(
        "b", bm.upload_to_device(b)).save()
    path = os.path.join(folder, victim)
    raw = bytearray(open(path, "rb").read())
    raw[len(raw) - 3] ^= 0x10  # in the array's bytes (or the manifest's last line)
    open(path, "wb").write(bytes(raw))
    sentinels = (np.full(1000, -1, np.float32), np.full((20, 3), -1, np.int16))
    targets = [bm.upload_to_device(s) for s in sentinels]
    ckpt = clbuf.Checkpoint(bm, folder).add("a", targets[0]).add("b", targets[1])
    with pytest.raises(clbuf.Error, match=r"Checkpoint\.load: .*" + victim) as error:
        ckpt.load()
    assert error.value.code == -30
    for target, sentinel in zip(targets, sentinels):
        assert same_bytes(bm.download_from_device(target), sentinel)


def test_a_truncated_or_missing_file_is_refused(bm, tmp_path):
    folder = str(tmp_path / "ckpt")
    clbuf.Checkpoint(bm, folder).add("a", bm.upload_to_device(np.arange(100.0))).save()
    path = os.path.join(folder, "a.npy")
    os.truncate(path, os.path.getsize(path) - 8)
    target = bm.upload_to_device(np.zeros(100))
    with pytest.raises(clbuf.Error, match=r"a\.npy"):
        clbuf.Checkpoint(bm, folder).add("a", target).load()
    with pytest.raises(clbuf.Error, match=r"no checkpoint"):
        clbuf.Checkpoint(bm, str(tmp_path / "absent")).add("a", target).load()
    with pytest.raises(clbuf.Error, match=r"has no array 'b'"):
        clbuf.Checkpoint(bm, folder).add("b", target).load()
    assert not bm.download_from_device(target).any()


def test_a_save_keeps_the_previous_checkpoint_until_the_new_one_is_whole(bm, tmp_path):
    folder = str(tmp_path / "ckpt")
    buffer = bm.upload_to_device(np.full(64, 1.0))
    ckpt = clbuf.Checkpoint(bm, folder).add("x", buffer)
    ckpt.save()
    bm.fill(buffer, 2.0)
    ckpt.save()  # replaces the first
    assert (np.load(os.path.join(folder, "x.npy")) == 2.0).all()
    assert not os.path.exists(folder + ".tmp") and not os.path.exists(folder + ".old")
    # A save cut off between its renames leaves folder.old: load() reads it.
    os.rename(folder, folder + ".old")
    assert clbuf.Checkpoint.complete_folder(folder) == folder + ".old"
    bm.fill(buffer, 0.0)
    ckpt.load()
    assert (bm.download_from_device(buffer) == 2.0).all()


def test_a_buffer_deleted_in_python_after_add_is_kept_alive(bm, tmp_path):
    folder = str(tmp_path / "ckpt")
    data = random_array(4096, np.float32)
    ckpt = clbuf.Checkpoint(bm, folder)
    buffer = bm.upload_to_device(data)
    ckpt.add("kept", buffer)
    keeper = bm.upload_to_device(np.zeros(4096, np.float32))  # the same memory again if freed
    del buffer
    gc.collect()
    churn = [bm.upload_to_device(np.full(4096, 9, np.float32)) for _ in range(4)]
    ckpt.save()
    assert same_bytes(np.load(os.path.join(folder, "kept.npy")), data)
    del churn, keeper


def test_bad_names_repeats_dtypes_and_contexts_are_refused(bm, new_manager, tmp_path):
    folder = str(tmp_path / "ckpt")
    buffer = bm.upload_to_device(np.zeros(4, np.float32))
    ckpt = clbuf.Checkpoint(bm, folder)
    for name in ("", "a b", "../x", "x" * 201):
        with pytest.raises(clbuf.Error, match=r"Checkpoint\.add: .*is not 1-200 of"):
            ckpt.add(name, buffer)
    ckpt.add("x", buffer)
    with pytest.raises(clbuf.Error, match=r"'x' added twice"):
        ckpt.add("x", buffer)
    big_endian = bm.upload_to_device(np.zeros(4, ">f4"))
    with pytest.raises(clbuf.Error, match=r"cannot checkpoint elements of"):
        ckpt.add("y", big_endian)
    with pytest.raises(clbuf.Error, match=r"must be a clbuf\.DeviceBuffer"):
        ckpt.add("z", np.zeros(4))
    other = new_manager()  # a manager of its own context
    with pytest.raises(clbuf.Error, match=r"another OpenCL context") as error:
        clbuf.Checkpoint(other, folder).add("x", buffer)
    assert error.value.code == -34
    assert ckpt.arrays == 1


def test_a_cleaned_up_manager_is_an_error_not_a_crash(new_manager, tmp_path):
    manager = new_manager()
    ckpt = clbuf.Checkpoint(manager, str(tmp_path / "ckpt"))
    ckpt.add("x", manager.upload_to_device(np.arange(8.0)))
    manager.cleanup()
    with pytest.raises(clbuf.Error, match=r"Checkpoint\.save"):
        ckpt.save()


def test_a_sharded_buffer_round_trips_through_its_shard_files(bm, tmp_path):
    group = clbuf.DeviceGroup([bm])
    data = random_array((12, 5), np.float64)
    field = group.scatter(data, unit=5, halo=1, max_shard_bytes=5 * 8 * 6)
    assert field.shards > 1  # pieces on one device
    folder = str(tmp_path / "ckpt")
    ckpt = clbuf.Checkpoint(bm, folder).add("field", field)
    ckpt.save()
    for k in range(field.shards):
        raw = np.load(os.path.join(folder, f"field-shard{k}.npy"))
        shard = raw.view(np.float64)[field.ghost:field.ghost + field.count(k)]
        assert same_bytes(shard, data.reshape(-1)[field.offset(k):field.offset(k) + field.count(k)])
    group.fill(field, 0.0)
    ckpt.load()
    assert same_bytes(group.gather(field), data)
    with pytest.raises(clbuf.Error, match=r"shape applies to a DeviceBuffer"):
        clbuf.Checkpoint(bm, folder).add("other", field, shape=(60,))
