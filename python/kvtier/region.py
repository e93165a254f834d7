"""A shared offload region: slot memory every process of one engine maps.

The region is kvtier's (``kvtier_region_*``): the creator sizes backing
files under ``/dev/shm`` (or another directory), records the layout in a
header page, and holds a lock on the files for as long as it lives, so a
file nobody holds is known to be left over from a crashed run and is
replaced.  A vLLM scheduler and its workers each map the same region
through this class; a worker's area of every row is its view
(`Region.worker_array`).  `reclaim_stale` removes the files of regions no
process maps any more (``kvtier_region_reclaim_stale``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._args import fill, slot_index
from ._ffi import CONSTANTS, ffi, lib
from ._handle import Handle
from .errors import Status, check, encode_str

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FoundRegion", "Region", "RegionView", "reclaim_stale"]

_OPEN = {
    "create_or_join": CONSTANTS["KVTIER_REGION_OPEN_MODE_CREATE_OR_JOIN"],
    "create": CONSTANTS["KVTIER_REGION_OPEN_MODE_CREATE"],
    "join": CONSTANTS["KVTIER_REGION_OPEN_MODE_JOIN"],
}
_OUTCOMES = {
    CONSTANTS["KVTIER_REGION_RECLAIM_REMOVED"]: "removed",
    CONSTANTS["KVTIER_REGION_RECLAIM_HELD"]: "held",
    CONSTANTS["KVTIER_REGION_RECLAIM_NOT_REGULAR"]: "not_regular",
    CONSTANTS["KVTIER_REGION_RECLAIM_OTHER_USER"]: "other_user",
    CONSTANTS["KVTIER_REGION_RECLAIM_NO_HEADER"]: "no_header",
    CONSTANTS["KVTIER_REGION_RECLAIM_CHANGED"]: "changed",
    CONSTANTS["KVTIER_REGION_RECLAIM_FAILED"]: "failed",
}
_PREFAULT = {
    "off": CONSTANTS["KVTIER_REGION_PREFAULT_OFF"],
    "auto": CONSTANTS["KVTIER_REGION_PREFAULT_AUTO"],
    "touch": CONSTANTS["KVTIER_REGION_PREFAULT_TOUCH"],
}


@dataclass(frozen=True)
class RegionView:
    """`rows` rows of `length` bytes, row ``r`` at ``offset + r * stride``
    from the region's base address."""

    offset: int
    stride: int
    length: int
    rows: int


class Region:
    """Creates or joins the region `name` (see ``kvtier_region_new``).

    Every process of one region passes the same layout: `slot_count` rows
    of `slot_bytes` (a multiple of the page size), with `worker_bytes` per
    worker inside each row when the per-worker layout is used.  `open` is
    ``"create_or_join"`` (default), ``"create"`` or ``"join"``; `prefault`
    ``"auto"``, ``"off"`` or ``"touch"``.  `barrier`, if given, is called
    once with the set-up status and must return only when every process of
    the region has called it (then the file names are removed).

    Use it as a context manager, or call `close`.
    """

    def __init__(
        self,
        name: str,
        slot_count: int,
        slot_bytes: int,
        *,
        directory: str | None = None,
        worker_bytes: int = 0,
        open: str = "create_or_join",
        join_timeout_ms: int = 30000,
        segments: int = 1,
        prefault: str = "auto",
        prefault_threads: int = 1,
        mode: int = 0o600,
        replace_stale: bool = True,
        barrier: Callable[[int], int] | None = None,
    ):
        options = ffi.new("kvtier_region_options *", lib.kvtier_region_options_default())
        keep = [ffi.new("char[]", encode_str(name, "name"))]
        options.name = keep[0]
        if directory is not None:
            if isinstance(directory, os.PathLike):
                directory = os.fspath(directory)
            keep.append(ffi.new("char[]", encode_str(directory, "directory")))
            options.directory = keep[-1]
        if not isinstance(open, str) or open not in _OPEN:
            raise ValueError(f"open: expected one of {', '.join(map(repr, _OPEN))}, got {open!r}")
        if not isinstance(prefault, str) or prefault not in _PREFAULT:
            raise ValueError(f"prefault: expected one of {', '.join(map(repr, _PREFAULT))}, got {prefault!r}")
        fill(
            options,
            {
                "slot_count": slot_count,
                "slot_bytes": slot_bytes,
                "worker_bytes": worker_bytes,
                "open": _OPEN[open],
                "join_timeout_ms": join_timeout_ms,
                "segments": segments,
                "prefault": _PREFAULT[prefault],
                "prefault_threads": prefault_threads,
                "mode": mode,
                "replace_stale": replace_stale,
            },
            "Region",
        )
        if barrier is not None:

            def call_barrier(_user_data: Any, setup_status: int) -> int:
                try:
                    return int(barrier(setup_status))
                except Exception:  # a barrier must not unwind into C
                    return int(Status.PEER_FAILED)

            keep.append(ffi.callback("kvtier_region_barrier_fn", call_barrier))
            options.barrier = keep[-1]
        out = ffi.new("kvtier_region **")
        check(lib.kvtier_region_new(options, out), "kvtier_region_new")
        # Buffers and arrays over the mapping keep `_h` alive: the mapping
        # is not unmapped while one lives (`close` refuses, and dropping the
        # region frees it only after the last of them).
        self._h = Handle(out[0], lib.kvtier_region_free, "region")
        self._call = self._h.call
        self.name = name
        base = ffi.new("void **")
        check(self._call(lib.kvtier_region_base, base), "kvtier_region_base")
        stride = ffi.new("size_t *")
        check(self._call(lib.kvtier_region_stride, stride), "kvtier_region_stride")
        count = ffi.new("uint32_t *")
        check(self._call(lib.kvtier_region_slot_count, count), "kvtier_region_slot_count")
        self._base = base[0]
        #: Bytes from one slot (row) to the next.
        self.stride: int = stride[0]
        #: Number of slots (rows).
        self.slot_count: int = count[0]
        self.worker_bytes = worker_bytes

    # -- the handle ---------------------------------------------------

    @property
    def handle(self) -> Any:
        """The ``kvtier_region *`` (for `Manager`); an error once closed."""
        return self._h.raw()

    @property
    def role(self) -> str:
        """``"creator"`` or ``"joiner"``: the part this process took."""
        role = ffi.new("kvtier_region_role *")
        check(self._call(lib.kvtier_region_read_role, role), "kvtier_region_read_role")
        return "creator" if role[0] == CONSTANTS["KVTIER_REGION_ROLE_CREATOR"] else "joiner"

    @property
    def base_address(self) -> int:
        """Address of slot 0 in this process."""
        self.handle  # raises once closed
        return int(ffi.cast("uintptr_t", self._base))

    # -- the memory ---------------------------------------------------

    def buffer(self) -> memoryview:
        """The whole region, ``slot_count * stride`` bytes, writable.  While
        it (or anything made from it) lives, `close` raises
        ``BufferError``, as ``mmap`` does."""
        return self._h.export(self._base, self.slot_count * self.stride)

    def slot(self, slot: int) -> memoryview:
        """Slot `slot`'s ``stride`` bytes, writable (a view of `buffer`).  A
        slot number that is no int is a ``TypeError``, one outside
        ``0..slot_count - 1`` an ``IndexError``."""
        slot = slot_index(slot, self.slot_count)
        address = ffi.new("void **")
        check(self._call(lib.kvtier_region_slot_address, slot, address), "kvtier_region_slot_address")
        offset = int(ffi.cast("uintptr_t", address[0])) - int(ffi.cast("uintptr_t", self._base))
        return self.buffer()[offset : offset + self.stride]

    def worker_view(self, worker: int, offset: int = 0, length: int | None = None) -> RegionView:
        """Worker `worker`'s `length` bytes at `offset` within its area of
        every row (per-worker layout: worker ``w``'s area starts at
        ``w * worker_bytes``)."""
        if length is None:
            length = self.worker_bytes - offset
        view = ffi.new("kvtier_region_view *")
        check(
            self._call(lib.kvtier_region_worker_view, worker, offset, length, view),
            "kvtier_region_worker_view",
        )
        return RegionView(view.offset, view.stride, view.length, view.rows)

    def canonical_view(self, offset: int, length: int) -> RegionView:
        """`length` bytes at `offset` of every row (the same for every worker)."""
        view = ffi.new("kvtier_region_view *")
        check(
            self._call(lib.kvtier_region_canonical_view, offset, length, view),
            "kvtier_region_canonical_view",
        )
        return RegionView(view.offset, view.stride, view.length, view.rows)

    def array(self, view: RegionView | None = None) -> np.ndarray:
        """A numpy ``uint8`` array over the region (rows x stride), or over
        `view` (rows x length, strided): writes go to the shared memory."""
        import numpy as np

        whole = np.frombuffer(self.buffer(), dtype=np.uint8)
        if view is None:
            return whole.reshape(self.slot_count, self.stride)
        return np.lib.stride_tricks.as_strided(
            whole[view.offset :], shape=(view.rows, view.length), strides=(view.stride, 1)
        )

    def worker_array(self, worker: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """`array` of `worker_view` (worker w's area of every row)."""
        return self.array(self.worker_view(worker, offset, length))

    # -- lifetime -----------------------------------------------------

    def unlink(self) -> bool:
        """Removes the backing files' names (every process has joined);
        whether this call removed one."""
        removed = ffi.new("bool *")
        check(self._call(lib.kvtier_region_unlink, removed), "kvtier_region_unlink")
        return bool(removed[0])

    def set_lent_slots(self, count: int) -> None:
        """Declares `count` slots lent to a device (the mapping is then kept
        at close); 0 clears it."""
        check(self._call(lib.kvtier_region_set_lent_slots, count), "kvtier_region_set_lent_slots")

    @property
    def exports(self) -> int:
        """Buffers taken with `buffer`, `slot`, `array` (and views of them)
        that are still alive."""
        return self._h.exports

    def close(self, *, keep_mapping_if_viewed: bool = False) -> bool:
        """Releases the region (removing its names if this process created
        them); whether the mapping was kept for lent slots.  A second call
        returns False.  While buffers or arrays taken from it are alive it
        raises ``BufferError`` and releases nothing (drop them first), or,
        with `keep_mapping_if_viewed`, releases everything but the mapping,
        which stays for the rest of the process (as for lent slots)."""

        def busy(count: int) -> BufferError:
            return BufferError(f"region {self.name!r}: {count} buffers or arrays taken from it are still alive")

        if keep_mapping_if_viewed and self._h.exports and not self._h.closed:
            self.set_lent_slots(self.slot_count)
            region = self._h.take()
        else:
            region = self._h.take(busy)
        if region is None:
            return False
        kept = ffi.new("bool *")
        check(lib.kvtier_region_close(region, kept), "kvtier_region_close")
        return bool(kept[0])

    def __enter__(self) -> Region:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class FoundRegion:
    """One region `reclaim_stale` found (``kvtier_region_reclaim_entry``)."""

    #: The region's name: its first file's name.
    name: str
    #: ``"removed"``, or why its files were kept: ``"held"``,
    #: ``"not_regular"``, ``"other_user"``, ``"no_header"``, ``"changed"``
    #: or ``"failed"``.
    outcome: str
    #: Why its files were kept, naming the file ("" when removed).
    reason: str
    #: Bytes of its files found.
    bytes: int
    #: Segment files found (``<name>.seg<N>``).
    segment_files: int
    #: Whether its first file was found (False: only segments were).
    first_file: bool

    @property
    def removed(self) -> bool:
        """Whether its files were removed."""
        return self.outcome == "removed"


def reclaim_stale(prefix: str, directory: str | None = None) -> list[FoundRegion]:
    """Removes the files of every region in `directory` (default
    ``/dev/shm``) whose name starts with `prefix` and whose files no
    process holds (left by a killed process), and returns every region
    found, removed or kept and why, in name order
    (``kvtier_region_reclaim_stale``; the rules are kvtier's, docs/region.md).

    Symlinks, FIFOs and other non-regular entries, files of other users,
    first files without a region header, and regions any of whose files a
    process holds are kept.  A directory that does not exist holds none;
    one that cannot be listed, or a bad `prefix` (empty, or with ``/``),
    raises `KvtierError`."""
    found: list[FoundRegion] = []
    failure: list[BaseException] = []

    def on_entry(_user_data: Any, entry: Any) -> None:
        try:
            found.append(
                FoundRegion(
                    name=os.fsdecode(ffi.string(entry.name)),
                    outcome=_OUTCOMES.get(entry.outcome, f"outcome {entry.outcome}"),
                    reason=ffi.string(entry.reason).decode("utf-8", "replace"),
                    bytes=entry.bytes,
                    segment_files=entry.segment_files,
                    first_file=bool(entry.first_file),
                )
            )
        except BaseException as e:  # a callback must not unwind into C
            failure.append(e)

    callback = ffi.callback("kvtier_region_reclaim_fn", on_entry)
    c_prefix = ffi.new("char[]", encode_str(prefix, "prefix"))
    c_directory = ffi.NULL if directory is None else ffi.new("char[]", encode_str(str(directory), "directory"))
    status = lib.kvtier_region_reclaim_stale(c_directory, c_prefix, callback, ffi.NULL, ffi.NULL)
    check(status, "kvtier_region_reclaim_stale")
    if failure:
        raise failure[0]
    return found
