"""kvtier: a multi-tier KV cache for LLM inference engines, from Python.

The bindings sit on kvtier's C ABI (``libkvtier.so`` and ``kvtier.h``,
loaded with cffi), so Python drives exactly the calls a C engine makes:

* `Region`: shared slot memory every process of an engine maps;
* `Primary`: the primary tier on its own;
* `Manager`: the primary tier with secondary tiers (files, Redis, or tiers
  written in Python: `Tier`), or, with `Manager.connect`, a manager in the
  node server ``kvtierd`` that engines share;
* `kvtier.vllm`: an offloading spec for vLLM 0.33;
* `set_log_callback` / `log_to_logging`: kvtier's log records in Python.

docs/python.md in the repository is the quick start.

Keys are ``bytes`` (1 to 64 bytes).  A failed call raises `KvtierError`
with the library's status and message; a store completion that named keys
it did not act on raises its subclass `KeysIgnoredError`, carrying what
the completion did; a connected manager whose server is gone raises its
subclass `DisconnectedError`.
"""

from __future__ import annotations

from ._ffi import CONSTANTS, ffi, lib
from .errors import DisconnectedError, KeysIgnoredError, KvtierError, Status
from .callbacks import LogLevel, RequestReport, log_callback_errors, log_to_logging, set_log_callback
from .manager import DropReport, Manager, PinOutcome, PinSet, ServerInfo, SlotMemory, TierMatcher, TierStat
from .primary import Primary
from .region import Region, RegionView
from .tier import Job, JobResult, Tier, TierRequest
from .types import (
    Event,
    EventKind,
    JobDirection,
    Locality,
    LookupAnswer,
    LookupResult,
    Medium,
    MissReason,
    OffloadPolicy,
    PromotionAnswer,
    RequestState,
    StoreCompletion,
    StorePlan,
)

__all__ = [
    "CONSTANTS",
    "DisconnectedError",
    "DropReport",
    "Event",
    "EventKind",
    "JobDirection",
    "Job",
    "JobResult",
    "KeysIgnoredError",
    "KvtierError",
    "Manager",
    "Locality",
    "LogLevel",
    "LookupAnswer",
    "LookupResult",
    "Medium",
    "MissReason",
    "OffloadPolicy",
    "PinOutcome",
    "PinSet",
    "Primary",
    "PromotionAnswer",
    "Region",
    "RegionView",
    "RequestReport",
    "RequestState",
    "ServerInfo",
    "SlotMemory",
    "Status",
    "Tier",
    "TierMatcher",
    "TierRequest",
    "TierStat",
    "StoreCompletion",
    "StorePlan",
    "library_version",
    "log_callback_errors",
    "log_to_logging",
    "set_log_callback",
]


def library_version() -> str:
    """The loaded library's version, ``"MAJOR.MINOR.PATCH"``."""
    return ffi.string(lib.kvtier_version()).decode()


__version__ = library_version()
