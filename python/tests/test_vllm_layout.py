"""The vLLM layer's layout fingerprint for its built-in tiers: each fs
tier of ``kvtier_tiers`` is given the engine's fingerprint unless its own
options name one, so a restarted engine of another layout is refused the
old directory.

Needs the unpacked vLLM 0.33 wheel (``make test-vllm`` fetches it into
build/vllm; or ``VLLM_ROOT``); skipped without.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import unpacked_vllm_wheel

REPO = Path(__file__).resolve().parents[2]
VLLM_ROOT = unpacked_vllm_wheel()
sys.path.insert(0, str(REPO / "tools" / "vllm_tests"))
import vllm_stubs  # noqa: E402

import kvtier  # noqa: E402

_UNDER_STUBS = ("torch", "vllm", "kvtier.vllm.spec", "kvtier.vllm.manager", "kvtier.vllm.metrics",
                "kvtier.vllm.tiers", "kvtier.vllm.compat", "kvtier.vllm._vllm")


def _under_stubs(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _UNDER_STUBS)


@pytest.fixture(scope="module", autouse=True)
def vllm():
    vllm_stubs.install(str(VLLM_ROOT))
    from kvtier.vllm.manager import build_kvtier_manager

    globals().update(build_kvtier_manager=build_kvtier_manager)
    yield
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, vllm_stubs._Finder)]
    vllm_stubs._installed = None
    for name in [n for n in sys.modules if _under_stubs(n)]:
        del sys.modules[name]
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            vars(sys.modules[parent]).pop(child, None)


def _fs(directory: Path, **more) -> dict:
    return {"type": "fs", "directory": str(directory), "direct_io": False, "read_threads": 1,
            "write_threads": 1, **more}


def test_built_in_tiers_take_the_engines_fingerprint_unless_they_name_their_own(tmp_path, region_name):
    with kvtier.Region(region_name, 4, 4096, directory=str(tmp_path)) as region:
        manager, _ = build_kvtier_manager(4, builtin_tiers=[_fs(tmp_path / "a")], region=region,
                                          layout_fingerprint="vllm model=m dtype=bf16")
        manager.close()
        assert (tmp_path / "a" / "kvtier-layout").read_text() == "vllm model=m dtype=bf16\n"
        # Another engine layout is refused the directory, naming both.
        with pytest.raises(kvtier.KvtierError, match="vllm model=m dtype=fp8"):
            build_kvtier_manager(4, builtin_tiers=[_fs(tmp_path / "a")], region=region,
                                 layout_fingerprint="vllm model=m dtype=fp8")
        # A tier's own fingerprint wins over the engine's.
        manager, _ = build_kvtier_manager(4, builtin_tiers=[_fs(tmp_path / "a", layout_fingerprint="vllm model=m dtype=bf16")],
                                          region=region, layout_fingerprint="vllm model=m dtype=fp8")
        manager.close()
        # No fingerprint: no marker.
        manager, _ = build_kvtier_manager(4, builtin_tiers=[_fs(tmp_path / "b")], region=region)
        manager.close()
        assert not (tmp_path / "b" / "kvtier-layout").exists()
