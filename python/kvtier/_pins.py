"""Pin sets (named sets of blocks a tier keeps resident) and block drops.
`ManagerPins` is a base of `Manager`, which gives it ``_call`` and
``_local_only``; a manager connected to kvtierd raises ``UNSUPPORTED``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ._ffi import ffi, lib
from ._keys import key_array
from .errors import Status, check, encode_str

__all__ = ["DropReport", "ManagerPins", "PinOutcome", "PinSet"]


class PinOutcome(NamedTuple):
    """What `Manager.pin_set` did: distinct keys held, and distinct keys
    absent from the tier (not held)."""

    pinned: int
    absent: int


class PinSet(NamedTuple):
    """One pin set: its name, its tier (0 the primary tier), the distinct
    keys it holds and their bytes (0 when the block size is unknown)."""

    name: str
    tier: int
    keys: int
    bytes: int


class DropReport(NamedTuple):
    """What `Manager.drop_blocks` did: blocks removed, matching blocks kept
    because busy, and selected tiers that cannot drop blocks (C tiers, a
    Redis tier on a cluster: skipped)."""

    dropped: int
    kept: int
    unsupported_tiers: int


class ManagerPins:
    """The pin-set and drop calls of `Manager`."""

    _call: Callable[..., Any]
    _local_only: Callable[[str], None]

    def pin_set(self, name: str, keys: Iterable[Any], tier: int = 0) -> PinOutcome:
        """Holds the blocks of `keys` resident in `tier` (0 the primary
        tier, or an fs tier) as pin set `name` (replacing a set of that
        name) until `unpin_set`.  Past the ``pinning.max_share`` bound:
        ``NO_SPACE``, nothing changed; another tier: ``UNSUPPORTED``."""
        self._local_only("pin_set")
        name_c = ffi.new("char[]", encode_str(name, "name"))
        array = key_array(keys)
        out = ffi.new("kvtier_pin_outcome *")
        status = self._call(lib.kvtier_manager_pin_set, name_c, tier, array.ptr, array.len, out)
        check(status, "kvtier_manager_pin_set")
        return PinOutcome(out.pinned, out.absent)

    def unpin_set(self, name: str) -> int:
        """Releases pin set `name`; returns how many keys it held
        (``NOT_FOUND`` for an unknown name)."""
        self._local_only("unpin_set")
        name_c = ffi.new("char[]", encode_str(name, "name"))
        out = ffi.new("size_t *")
        check(self._call(lib.kvtier_manager_unpin_set, name_c, out), "kvtier_manager_unpin_set")
        return int(out[0])

    def pin_sets(self) -> list[PinSet]:
        """The pin sets, by name."""
        self._local_only("pin_sets")
        n = ffi.new("size_t *")
        capacity = 8
        while True:
            buf = ffi.new("kvtier_pin_set_info[]", capacity)
            status = self._call(lib.kvtier_manager_pin_sets, buf, capacity, n)
            if status == Status.BUFFER_TOO_SMALL:
                capacity = int(n[0])
                continue
            check(status, "kvtier_manager_pin_sets")
            break
        return [
            PinSet(ffi.string(buf[i].name).decode(), int(buf[i].tier), int(buf[i].keys), int(buf[i].bytes))
            for i in range(int(n[0]))
        ]

    def drop_blocks(self, key_prefix: bytes = b"", fingerprint: str | None = None) -> DropReport:
        """Drops every block whose key starts with `key_prefix` (every block
        for an empty one) from the tiers whose layout fingerprint is
        `fingerprint` (every tier for None); busy blocks are kept."""
        self._local_only("drop_blocks")
        prefix = bytes(key_prefix)
        sel = ffi.new("kvtier_drop_selector *")
        sel.struct_size = ffi.sizeof("kvtier_drop_selector")
        prefix_c = ffi.new("uint8_t[]", prefix) if prefix else ffi.NULL
        sel.key_prefix = prefix_c
        sel.key_prefix_len = len(prefix)
        fingerprint_c = ffi.NULL if fingerprint is None else ffi.new("char[]", encode_str(fingerprint, "fingerprint"))
        sel.fingerprint = fingerprint_c
        out = ffi.new("kvtier_drop_report *")
        check(self._call(lib.kvtier_manager_drop_blocks, sel, out), "kvtier_manager_drop_blocks")
        return DropReport(out.dropped, out.kept, out.unsupported_tiers)
