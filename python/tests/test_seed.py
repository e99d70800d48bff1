# SPDX-License-Identifier: MIT
"""The seed's two test cases, as the seed states them, on the seed's API."""
import numpy as np

from clbuf import BufferManager


def test_round_trip_1000_random_float32_values_match_exactly(bm: BufferManager):
    data = np.random.rand(1000).astype(np.float32)
    device_buffer = bm.upload_to_device(data)
    result = bm.download_from_device(device_buffer, data.shape, data.dtype)
    assert result.dtype == np.float32
    assert result.shape == data.shape
    np.testing.assert_array_equal(result, data)


def test_device_copy_makes_both_buffers_identical(bm: BufferManager):
    first = np.random.rand(1000).astype(np.float32)
    second = np.random.rand(1000).astype(np.float32)
    first_buffer = bm.upload_to_device(first)
    second_buffer = bm.upload_to_device(second)
    bm.copy_device_buffer(first_buffer, second_buffer, first.nbytes)
    first_result = bm.download_from_device(first_buffer, first.shape, first.dtype)
    second_result = bm.download_from_device(second_buffer, second.shape, second.dtype)
    np.testing.assert_array_equal(first_result, second_result)
    np.testing.assert_array_equal(first_result, first)
