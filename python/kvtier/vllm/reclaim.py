"""Removing the shared-memory files of crashed engines.

An engine's region file is named for its engine id, which is fresh at
every start, so a file left by a crashed engine (``kill -9``) is never
replaced by a later one.  `reclaim_stale_regions` removes such files
through kvtier's own sweep (`kvtier.region.reclaim_stale`, the C call
``kvtier_region_reclaim_stale``, also run by ``kvtier-inspect regions
--reclaim``): a region whose files no process holds is left over, since
every process of a live region holds a shared ``flock`` on each backing
file for as long as it maps it.  The directory is treated as hostile:
symlinks, FIFOs and anything else that is not a regular file of this user
is never opened, followed or removed, nor a first file without a region
header; the rules in full are in kvtier's docs/region.md.
"""

from __future__ import annotations

from ..region import reclaim_stale

__all__ = ["reclaim_stale_regions", "DEFAULT_DIRECTORY", "PREFIX"]

#: Where regions live unless ``kvtier_region_directory`` says otherwise.
DEFAULT_DIRECTORY = "/dev/shm"
#: The first part of every region name the vLLM layer gives.
PREFIX = "vllm_kvtier_"


def reclaim_stale_regions(directory: str | None = None, prefix: str = PREFIX) -> list[str]:
    """Removes the region files under `directory` (default ``/dev/shm``)
    whose names start with `prefix` and that no process holds, with their
    segment files (and segment files whose region's first file is gone);
    the names of the regions removed.  Files of live regions, of other
    users, without a region header, and anything that is not a regular
    file are left alone.  A directory that does not exist holds none; one
    that cannot be listed, or a bad `prefix`, raises `KvtierError`."""
    return [r.name for r in reclaim_stale(prefix, directory or DEFAULT_DIRECTORY) if r.removed]
