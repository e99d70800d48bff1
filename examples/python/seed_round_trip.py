#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The seed's round trip, with the seed's API: upload 1000 random float32 values, download them,
check them exactly; upload two arrays, copy the first onto the second on the device, download
both, check they are identical.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/seed_round_trip.py
"""
import numpy as np

from clbuf import BufferManager

manager = BufferManager()  # GPU preferred, CPU fallback; CLBUF_DEVICE honoured
try:
    print(f"device: {manager.device.name} ({manager.device.type})")

    # 1. Round trip: the bytes that come back are the bytes that went up.
    data = np.random.rand(1000).astype(np.float32)
    device_buffer = manager.upload_to_device(data)
    result = manager.download_from_device(device_buffer, data.shape, data.dtype)
    assert result.dtype == np.float32 and result.shape == data.shape
    assert result.tobytes() == data.tobytes(), "round trip changed the data"
    print(f"round trip: {data.nbytes} bytes of {data.dtype} match exactly")

    # 2. Device-to-device copy: no host round trip in between.
    first = np.random.rand(1000).astype(np.float32)
    second = np.random.rand(1000).astype(np.float32)
    first_buffer = manager.upload_to_device(first)
    second_buffer = manager.upload_to_device(second)
    manager.copy_device_buffer(first_buffer, second_buffer, first.nbytes)
    first_result = manager.download_from_device(first_buffer, first.shape, first.dtype)
    second_result = manager.download_from_device(second_buffer, second.shape, second.dtype)
    assert first_result.tobytes() == first.tobytes(), "the source changed"
    assert second_result.tobytes() == first.tobytes(), "the copy differs from its source"
    print(f"device copy: {first.nbytes} bytes, both buffers identical")
finally:
    manager.cleanup()

print("seed round trip: OK")
