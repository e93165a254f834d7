"""kvtier's vLLM spec with ``kvtier_server``, through the spec itself: two
engines' schedulers (each `KvtierOffloadingSpec.get_manager`) in one real
kvtierd share blocks, an engine of another dtype is refused at start, the
server's options are refused beside it, and shutting an engine down
leaves the server's region alone.

Needs the unpacked vLLM 0.33 wheel (``make test-vllm`` fetches it into
build/vllm/wheel; ``VLLM_ROOT`` names another), imported under the
stand-ins of tools/vllm_tests/vllm_stubs.py as test_vllm_calls.py does;
skipped without it.  The worker side (vLLM's CPU worker, with torch) is
`kvtier.vllm.server.server_region`, tested in test_vllm_server.py.
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

from server_util import Server  # noqa: E402

import kvtier  # noqa: E402

_UNDER_STUBS = ("torch", "vllm", "kvtier.vllm.spec", "kvtier.vllm.manager", "kvtier.vllm.metrics",
                "kvtier.vllm.tiers", "kvtier.vllm.compat", "kvtier.vllm._vllm")

PAGE = 4096
WORLD = 2


def _under_stubs(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _UNDER_STUBS)


def _forget_stubbed_modules() -> None:
    """Drops the modules imported under the stand-ins, and their names on
    their packages (``from . import _vllm`` would find an old one)."""
    import kvtier.vllm

    for name in [n for n in sys.modules if _under_stubs(n)]:
        del sys.modules[name]
    for name in _UNDER_STUBS:
        parent, _, child = name.rpartition(".")
        if parent == "kvtier.vllm":
            vars(kvtier.vllm).pop(child, None)


@pytest.fixture(scope="module", autouse=True)
def vllm():
    _forget_stubbed_modules()  # another test file's, imported under other stand-ins
    vllm_stubs.install(str(VLLM_ROOT))
    from vllm.v1.kv_offload import base, config

    from kvtier.vllm.spec import KvtierOffloadingSpec

    globals().update(base=base, vconfig=config, KvtierOffloadingSpec=KvtierOffloadingSpec)
    yield
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, vllm_stubs._Finder)]
    vllm_stubs._installed = None
    _forget_stubbed_modules()


def engine(engine_id: str, extra: dict, *, dtype: str = "float16", events: bool = False):
    c = vconfig
    return c.OffloadingConfig(
        groups=(c.OffloadingGroupConfig(tokens_per_block=16, layer_names=("l0",), group_id=0),),
        worker_kv_bytes_per_block=PAGE,
        enable_kv_cache_events=events,
        extra_config=extra,
        engine_id=engine_id,
        model=c.OffloadingModelConfig(name="test-model", dtype=dtype),
        cache=c.OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=c.OffloadingParallelConfig(
            rank=0, world_size=WORLD, tp_size=WORLD, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=False,
        ),
    )


@pytest.fixture
def server(region_name):
    from kvtier.vllm.server import fingerprint

    s = Server(region_name, fingerprint=fingerprint(engine("any", {}), replicated=False),
               slots=8, block_bytes=WORLD * PAGE)
    try:
        yield s
    finally:
        s.stop()


def region_files(server: Server) -> list[str]:
    return sorted(p.name for p in server.directory.iterdir() if p.name.startswith(server.name))


def test_two_engines_schedulers_share_the_servers_blocks(server):
    files = region_files(server)
    extra = {"kvtier_server": str(server.path)}
    a, b = KvtierOffloadingSpec(engine("a", extra)), KvtierOffloadingSpec(engine("b", extra))
    assert (a.num_chunks, a.kv_bytes_per_chunk) == (8, WORLD * PAGE)
    ma, mb = a.get_manager(), b.get_manager()
    key = base.make_offload_key((7).to_bytes(8, "big"), 0)
    writer = base.ReqContext(req_id="w")
    ma.on_new_request(writer)
    out = ma.prepare_store([key], writer)
    assert list(out.keys_to_store) == [key]
    ma.complete_store([key], writer)
    ma.on_request_finished(writer)
    reader = base.ReqContext(req_id="r")
    mb.on_new_request(reader)
    assert mb.lookup(key, reader) is base.LookupResult.HIT
    mb.on_request_finished(reader)
    ma.shutdown()
    mb.shutdown()
    assert ma._m.closed and mb._m.closed
    # The engines' shutdown leaves the server's region to the server.
    assert region_files(server) == files


def test_an_engine_of_another_dtype_is_refused_at_start(server):
    with pytest.raises(kvtier.KvtierError) as info:
        KvtierOffloadingSpec(engine("c", {"kvtier_server": str(server.path)}, dtype="bfloat16"))
    assert info.value.status == kvtier.Status.INVALID_ARGUMENT


def test_tiers_and_events_are_refused_beside_a_server(server):
    with pytest.raises(ValueError, match="kvtier_tiers"):
        KvtierOffloadingSpec(engine("d", {"kvtier_server": str(server.path), "kvtier_tiers": [{"type": "fs"}]}))
    with pytest.raises(ValueError, match="events"):
        KvtierOffloadingSpec(engine("e", {"kvtier_server": str(server.path)}, events=True))
