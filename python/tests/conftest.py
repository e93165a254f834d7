"""Shared fixtures of the kvtier Python tests."""

from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture
def region_name() -> str:
    """A region name no other test uses."""
    return f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def keys(n: int, start: int = 0) -> list[bytes]:
    """`n` distinct 12-byte keys (8-byte hash, 4-byte big-endian group 0)."""
    return [(start + i).to_bytes(8, "big") + b"\0\0\0\0" for i in range(n)]
