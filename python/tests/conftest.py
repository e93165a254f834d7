"""Shared fixtures of the kvtier Python tests."""

from __future__ import annotations

import importlib
import os
import uuid
from pathlib import Path
from types import ModuleType

import pytest

#: ``KVTIER_REQUIRE_ALL=1`` (``make test`` and CI set it): a test whose tool
#: is missing fails instead of skipping.
REQUIRE_ALL = os.environ.get("KVTIER_REQUIRE_ALL") == "1"


def skip_or_fail(reason: str, *, allow_module_level: bool = False) -> None:
    """Skips the calling test (or module) for ``reason``, or fails it under
    ``KVTIER_REQUIRE_ALL=1``."""
    if REQUIRE_ALL:
        pytest.fail(f"{reason}, and KVTIER_REQUIRE_ALL=1 requires every test to run", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)


def import_or_fail(name: str) -> ModuleType:
    """``pytest.importorskip`` at module level, failing under ``KVTIER_REQUIRE_ALL=1``."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        skip_or_fail(f"cannot import {name} ({e}; `make test` installs it)", allow_module_level=True)
        raise


def unpacked_vllm_wheel() -> Path:
    """The unpacked vLLM 0.33 wheel (``VLLM_ROOT``, or build/vllm/wheel, which
    ``make test-vllm`` fetches); skips the calling module without it, also
    under ``KVTIER_REQUIRE_ALL=1``: it is a download, not a tool ``make test``
    installs, and ``make test-vllm`` runs these tests with it."""
    repo = Path(__file__).resolve().parents[2]
    root = Path(os.environ.get("VLLM_ROOT") or repo / "build" / "vllm" / "wheel")
    if not (root / "vllm" / "v1" / "kv_offload" / "base.py").is_file():
        pytest.skip(f"no unpacked vLLM 0.33 wheel under {root}", allow_module_level=True)
    return root


def require_root(what: str) -> None:
    """Skips (or fails, under ``KVTIER_REQUIRE_ALL=1``) unless running as root."""
    if os.geteuid() != 0:
        skip_or_fail(f"{what} needs root")


@pytest.fixture
def region_name() -> str:
    """A region name no other test uses."""
    return f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def keys(n: int, start: int = 0) -> list[bytes]:
    """`n` distinct 12-byte keys (8-byte hash, 4-byte big-endian group 0)."""
    return [(start + i).to_bytes(8, "big") + b"\0\0\0\0" for i in range(n)]
