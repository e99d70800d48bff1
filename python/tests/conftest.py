# SPDX-License-Identifier: MIT
"""Shared fixtures. Every test needs an OpenCL device: without one the tests skip, unless
CLBUF_REQUIRE_DEVICE=1 (as CI sets) makes that a failure."""
import os

import pytest

import clbuf


def _manager_or_skip():
    try:
        return clbuf.BufferManager()
    except clbuf.Error as error:
        if os.environ.get("CLBUF_REQUIRE_DEVICE") == "1":
            pytest.fail(f"CLBUF_REQUIRE_DEVICE=1 but no OpenCL device: {error}")
        pytest.skip(f"no OpenCL device: {error}")


@pytest.fixture
def bm():
    manager = _manager_or_skip()
    yield manager
    manager.cleanup()


@pytest.fixture
def new_manager():
    """A factory for extra managers, each cleaned up at the end."""
    made = []

    def make():
        manager = _manager_or_skip()
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.cleanup()
