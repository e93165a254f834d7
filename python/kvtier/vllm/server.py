"""The spec's ``kvtier_server`` option: the engine's cache is the node
server ``kvtierd``'s, shared with every engine connected to it.

The scheduler side's manager is `Manager.connect` to the server's socket
instead of a local manager; each worker maps the server's region (its name
and directory from `Manager.server_info`) instead of creating one, and
never removes it (the server owns its files).  The engine's layout goes to
the server at connect (`connect_options`): the slot size and row stride
(``kv_bytes_per_chunk``), and a fingerprint of the model and the layout
(`fingerprint`), so a server made for another model, dtype, block size or
parallel layout refuses the engine (``INVALID_ARGUMENT``, naming the
difference) instead of serving it another engine's bytes.

This module imports nothing of vLLM: it reads the fields of vLLM's
``OffloadingConfig`` it needs by name.
"""

from __future__ import annotations

from typing import Any

from ..manager import Manager, ServerInfo
from ..region import Region

__all__ = ["fingerprint", "connect_options", "connect", "server_region", "refuse_local_options"]

#: Extra config keys that configure a local manager: with ``kvtier_server``
#: they belong to the server's configuration and are refused.
LOCAL_ONLY = ("kvtier_tiers", "secondary_tiers", "kvtier_region_directory", "kvtier_progress")


def fingerprint(config: Any, *, replicated: bool) -> str:
    """The engine's model/layout fingerprint: model name and dtype, tokens
    per block and per hash, blocks per chunk, the parallel layout and the
    per-worker bytes of a block (readable, to copy into the server's
    ``server.fingerprint``)."""
    model = config.model
    parallel = config.parallel
    tokens = ",".join(str(group.tokens_per_block) for group in config.groups)
    return (
        f"vllm model={model.name} dtype={model.dtype} tokens_per_block={tokens} "
        f"tokens_per_hash={config.cache.tokens_per_hash} blocks_per_chunk={config.cache.blocks_per_chunk} "
        f"tp={parallel.tp_size} pp={parallel.pp_size} world={parallel.world_size} "
        f"layout={'replicated' if replicated else 'per-worker'} "
        f"kv_bytes_per_block={config.worker_kv_bytes_per_block}"
    )


def connect_options(extra_config: Any, config: Any, kv_bytes_per_chunk: int, *, replicated: bool) -> dict[str, Any]:
    """`Manager.connect`'s keyword arguments for this engine: the path
    (``kvtier_server``), the slot size and stride (`kv_bytes_per_chunk`),
    the fingerprint (``kvtier_server_fingerprint`` if given, else
    `fingerprint`) and the engine id as the connection's name."""
    path = extra_config.get("kvtier_server")
    if not isinstance(path, str) or not path:
        raise ValueError(f"kvtier_server: expected the server's socket path (a str), got {path!r}")
    chosen = extra_config.get("kvtier_server_fingerprint")
    if chosen is None:
        chosen = fingerprint(config, replicated=replicated)
    return {
        "path": path,
        "block_bytes": kv_bytes_per_chunk,
        "slot_stride": kv_bytes_per_chunk,
        "fingerprint": chosen,
        "name": f"vllm:{config.engine_id}",
    }


def refuse_local_options(extra_config: Any, *, events: bool) -> None:
    """A ``ValueError`` for options a server's engine cannot take: tiers,
    the region's directory and the progress rule are the server's
    configuration, and KV cache events are not delivered to engines."""
    given = [key for key in LOCAL_ONLY if extra_config.get(key)]
    if events:
        given.append("KV cache events (kv_events_config)")
    if given:
        raise ValueError(
            f"kvtier_server: {', '.join(given)} cannot be used with a node server: "
            "its tiers, region and progress rule are the server's configuration, and it "
            "does not deliver events to engines"
        )


def connect(options: dict[str, Any]) -> Manager:
    """A manager connected to the server (`connect_options`)."""
    options = dict(options)
    return Manager.connect(options.pop("path"), **options)


def server_region(info: ServerInfo) -> Region:
    """The server's region, joined (never created, never removed here):
    its slots of the server's layout.  The region has no worker areas (an
    engine connected to a server maps it without them): the worker's
    views are its own offsets in each row (`KvtierSharedRegion`)."""
    return Region(
        info.region_name,
        info.slot_count,
        info.slot_bytes,
        directory=info.region_directory,
        open="join",
    )
