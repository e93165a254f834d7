"""A manager in the node server ``kvtierd`` (``kvtier_manager_connect``):
the connect options, the connection, and what it is connected to.

`Manager.connect` is the public face; here the Python values become
``kvtier_connect_options`` (each refused, before any connection, with the
``TypeError``, ``OverflowError`` or ``ValueError`` the rest of the package
gives), and ``kvtier_server_info`` becomes a `ServerInfo`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ._args import fill
from ._ffi import ffi, lib
from .errors import KvtierError, Status, check, encode_str

__all__ = ["ServerInfo", "connect", "server_info", "not_connected"]


@dataclass(frozen=True)
class ServerInfo:
    """What a manager made by `Manager.connect` is connected to
    (``kvtier_server_info``): the server's region (`region_name` in
    `region_directory`, `slot_count` slots of `slot_bytes` bytes, `slot_stride`
    apart), its primary tier's `capacity` in slots, the layout `fingerprint`
    the engine and the server share, the `client_id` the server gave this
    connection and the `protocol` version spoken."""

    region_name: str
    region_directory: str
    slot_count: int
    slot_bytes: int
    slot_stride: int
    capacity: int
    fingerprint: str
    client_id: int
    protocol: int


def _path(path: Any) -> bytes:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if isinstance(path, bytes):
        raise TypeError("path: expected a str or os.PathLike of str, got bytes")
    return encode_str(path, "path")


def connect(
    path: Any,
    *,
    block_bytes: int,
    slot_stride: int,
    fingerprint: str,
    name: str,
    call_timeout_ms: int,
    spin_us: int,
) -> Any:
    """A ``kvtier_manager *`` connected to the server at `path` (the
    caller owns it)."""
    path_c = _path(path)
    fingerprint_c = ffi.new("char[]", encode_str(fingerprint, "fingerprint"))
    name_c = ffi.new("char[]", encode_str(name, "name"))
    options = ffi.new("kvtier_connect_options *", lib.kvtier_connect_options_default())
    values = {
        "block_bytes": block_bytes,
        "slot_stride": slot_stride,
        "call_timeout_ms": call_timeout_ms,
        "spin_us": spin_us,
    }
    for key, value in values.items():
        if isinstance(value, bool):  # an int in Python, never meant here
            raise TypeError(f"connect: {key}: expected an int, got bool")
    fill(options, values, "connect")
    options.fingerprint = fingerprint_c
    options.name = name_c if name else ffi.NULL
    out = ffi.new("kvtier_manager **")
    check(lib.kvtier_manager_connect(path_c, options, out), "kvtier_manager_connect")
    return out[0]


def server_info(ptr: Any) -> ServerInfo:
    """``kvtier_manager_server_info`` of a connected manager, copied."""
    info = ffi.new("kvtier_server_info *")
    info.struct_size = ffi.sizeof("kvtier_server_info")
    check(lib.kvtier_manager_server_info(ptr, info), "kvtier_manager_server_info")

    def text(p: Any) -> str:
        return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else ""

    return ServerInfo(
        region_name=text(info.region_name),
        region_directory=text(info.region_directory),
        slot_count=int(info.slot_count),
        slot_bytes=int(info.slot_bytes),
        slot_stride=int(info.slot_stride),
        capacity=int(info.capacity),
        fingerprint=text(info.fingerprint),
        client_id=int(info.client_id),
        protocol=int(info.protocol),
    )


def not_connected(what: str) -> KvtierError:
    """The error of a call a connected manager does not take (the C
    library's ``UNSUPPORTED``, raised before anything is set up for it)."""
    return KvtierError(
        Status.UNSUPPORTED,
        f"Manager.{what}: not on a manager connected to kvtierd (the server's "
        "configuration owns its tiers, events and resets)",
    )
