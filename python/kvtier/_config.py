"""A manager's configuration as the JSON document the library parses.

`Manager(**options)` and `Manager.from_json(document)` both end here: the
keyword arguments become the same document (``capacity`` under
``"primary"``, ``progress_hold`` as ``"progress": {"hold": ...}``, ...),
and ``kvtier_manager_new_from_json_with_region`` reads it.  So one parser,
the library's, holds every rule of construction (defaults, ranges, which
tiers need slot memory) and words every error, whichever way a manager is
built; Python only turns its values into JSON, and refuses those that have
no JSON form with a ``TypeError`` naming where they were.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["PRIMARY", "PROGRESS", "TOP", "document", "encode"]

#: Keyword arguments that go under ``"primary"``.
PRIMARY = ("capacity", "capacity_bytes", "policy", "store_threshold", "admission_table_size", "event_capacity", "kv_groups")
#: Keyword arguments that go under ``"progress"``, and their names there.
PROGRESS = {"progress_hold": "hold", "progress_wait_steps": "wait_steps", "progress_wait_ms": "wait_ms"}
#: Keyword arguments that are top-level fields of the document.
TOP = ("block_bytes", "promotion_answer", "error_log_capacity", "region", "tiers", "metrics")


def document(options: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document of a manager's keyword arguments (those that are
    None left out: the library's defaults)."""
    doc: dict[str, Any] = {}
    primary: dict[str, Any] = {}
    progress: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name in PRIMARY:
            primary[name] = value
        elif name in PROGRESS:
            progress[PROGRESS[name]] = value
        elif name in TOP:
            doc[name] = value
        else:
            raise TypeError(f"Manager: unexpected keyword argument {name!r}")
    if primary:
        doc["primary"] = primary
    if progress:
        doc["progress"] = progress
    return doc


def _plain(value: Any, path: str) -> Any:
    """`value` as plain JSON values (dict, list, str, int, float, bool,
    None): a ``TypeError`` naming `path` for anything without a JSON form."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum as its number
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} has no JSON form (JSON numbers are finite)")
        return float(value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: keys of a JSON object are str, got {type(key).__name__} {key!r}")
            out[key] = _plain(item, f"{path}.{key}" if path else key)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, os.PathLike):
        return _plain(os.fspath(value), path)
    item = getattr(value, "item", None)  # a numpy scalar: its Python value
    if callable(item) and getattr(value, "shape", None) == ():
        return _plain(item(), path)
    raise TypeError(
        f"{path}: expected a JSON value (str, int, float, bool, None, a list or a mapping of them), "
        f"got {type(value).__name__}"
    )


def encode(config: Any) -> bytes:
    """A configuration (a JSON string or bytes, or a mapping) as the UTF-8
    document the library reads."""
    if isinstance(config, str):
        return config.encode("utf-8", "surrogatepass")
    if isinstance(config, (bytes, bytearray, memoryview)):
        return bytes(config)
    if isinstance(config, Mapping):
        return json.dumps(_plain(config, "")).encode()
    raise TypeError(f"config: expected a JSON document (str or bytes) or a mapping, got {type(config).__name__}")
