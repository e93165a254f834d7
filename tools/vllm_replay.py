#!/usr/bin/env python3
"""vllm_replay: the workload replay driven through vLLM 0.33's own managers.

This is the reference side of the replay checks: it runs the same replay as
`tools/kvtier-replay.c`, step for step, on the KV-offloading managers of an
unpacked vLLM wheel, and prints the same JSON counters, so that the expected
files in `tests/replay-expected/` are vLLM's behaviour, not kvtier's.

    python3 tools/vllm_replay.py --vllm-root DIR --workload FILE --blocks N \
        [--policy lru|arc] [--batch B] [--tiers none|mem] [--hit-pending] \
        [--positions] [--managers vllm|kvtier]

`DIR` is a directory holding the `vllm/` package of the vLLM 0.33.0 wheel
(`pip download vllm==0.33.0 --no-deps`, then unzip the wheel; only its
Python files are read).  The managers used are `CPUOffloadingManager`
(`vllm/v1/kv_offload/cpu/manager.py`, with its `lru` or `arc` policy) for
`--tiers none`, and `TieringOffloadingManager` over a
`CPUPrimaryTierOffloadingManager` plus the in-memory tier below for
`--tiers mem`.  Events are enabled; the admission threshold is vLLM's default
(every offer stored).  Only the imports that need torch (or, through it, the
rest of vLLM and its dependencies) are replaced by stand-ins: `torch` itself
(a bare `Tensor` class for a type annotation), the package `__init__` files
of `vllm`, `vllm.utils` and `vllm.distributed...` (bare packages over the
wheel's directories), `vllm.logger` (Python's logging), `vllm.v1.kv_hints`
(a type annotation; it needs msgspec), the connector's stats class
(`OffloadingConnectorStats`: a sink, stats change no decision) and the
shared-memory region of the primary tier (a plain buffer: no KV bytes move).
It needs `python3` and `numpy` (and `typing_extensions`, as vLLM does).

The replay (the same rules as the C driver):

* Configuration: primary capacity `--blocks N` blocks, eviction policy `lru`
  or `arc`, `--batch B` requests per engine step (default 16), and either no
  secondary tier or one in-memory tier `mem`.  The `mem` tier has no
  capacity bound, answers HIT to a lookup of every key it has been asked to
  store, and reports every job submitted to it (store or load) as finished,
  successfully, the next time it is polled for finished jobs.
* Requests are read in file order (lines `R <req_id> <n_keys> <key_hex>...`,
  a key being 12 bytes: an 8-byte block hash and a 4-byte big-endian KV
  group index; `#` lines are comments), `B` consecutive ones per step.  Each
  step:
  1. `on_new_request` for every request of the step;
  2. for every request: `lookup` its keys in order, counting the leading
     HITs `h` and stopping at the first other answer.  A HIT_PENDING or
     RETRY stop defers the request: it loads and stores nothing this step
     and its `h` hits are not counted.  Otherwise `prepare_load` then
     `touch` the first `h` keys if `h > 0` (they count as hit blocks), and on
     a MISS stop `prepare_store` the rest (`keys[h:]`); a refusal counts as a
     rejected store;
  3. `on_schedule_end` once (its context names the step's requests as new);
  4. for every request: `complete_load` of its `h` loaded keys (if any),
     `complete_store(success=True)` of the keys `prepare_store` said to store
     (if any), then `on_request_finished`;
  5. drain the manager's events.
* After the last step: while the manager reports pending work, at most 10
  times, `on_schedule_end` with no requests and then the event drain.
* With `--positions`, block `i` of a request (0-based) ends at token
  `16 * (i + 1)`, recorded on the request's context before its first call.

Output, one JSON object: `requests`, `steps` (batches only),
`manager_calls` (every call on the manager: `has_pending_work` and each
event drain included), `lookups`, `hit_blocks`, `stops_miss`,
`stops_pending`, `blocks_stored`, `rejected_stores`, `blocks_evicted` (keys
of drained "removed" events of the primary tier), `promotion_blocks` and
`cascade_blocks` (keys of load and store jobs submitted to the `mem` tier),
`events` (keys of all drained events), `wall_s` (the replay loop) and
`ns_per_call`, and the same in the process's CPU time, `cpu_s` and
`cpu_ns_per_call` (what the replay itself used: on a machine other work
shares, the wall time also counts the time the process waited for a
core).  vLLM's metadata-only removals (the cleanup of a failed
write, which is no public eviction) are not counted; this replay has none.

`--hit-pending` is accepted so that every case of the C driver has a
counterpart: it selects kvtier's option answering HIT_PENDING (rather than
RETRY) to a lookup that starts a promotion.  vLLM 0.33 always answers
HIT_PENDING there; the driver defers a request on either answer, so the
counters are the same with or without it.

`--managers kvtier` runs the same driver over kvtier's managers instead:
`kvtier.vllm.compat`'s classes (one kvtier manager each, through the C
API, the `mem` tier behind the C vtable) take the place of vLLM's, with
the same constructor arguments.  The package is imported from `python/`
beside this script (the library from `target/release`, or `KVTIER_LIBRARY`).
The counters must be the same; `ns_per_call` then gives the Python layer's
cost per manager call beside vLLM's own managers.

Regenerating the expected files (`tests/replay-expected/`, named
`<preset>-<seed>-<blocks>-<policy>-<tiers>[-hit-pending].json`): write the
workload with `target/release/kvtier-workload --preset P --seed S --out F`,
then run this script with the case's flags and `--expected-out FILE`
(the counters without the times).  The cases are listed in
`tools/replay-cases.txt`; `tools/replay-expected.sh` regenerates every file.
"""

import argparse
import importlib
import json
import logging
import os
import sys
import time
import types


def _bare_package(name, root):
    """A package module over the wheel's directory, its __init__ not run."""
    mod = types.ModuleType(name)
    mod.__path__ = [os.path.join(root, *name.split("."))]
    sys.modules[name] = mod
    return mod


class _Logger(logging.LoggerAdapter):
    """vLLM's logger calls, on Python's logging."""

    def __init__(self, name):
        super().__init__(logging.getLogger(name), {})

    def warning_once(self, msg, *args, **kwargs):
        self.warning(msg, *args, **kwargs)

    def info_once(self, msg, *args, **kwargs):
        self.info(msg, *args, **kwargs)

    def debug_once(self, msg, *args, **kwargs):
        self.debug(msg, *args, **kwargs)


class _StatsSink:
    """Stands in for OffloadingConnectorStats: records nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None

    def is_empty(self):
        return True

    def aggregate(self, other):
        return self


class _Region:
    """Stands in for SharedOffloadRegion: one byte per chunk, never read."""

    def __init__(self, num_chunks):
        self._buf = bytearray(max(num_chunks, 1))

    def create_kv_memoryview(self):
        return memoryview(self._buf).cast("B", (len(self._buf), 1))

    def cleanup(self):
        pass


def load_vllm(root):
    """Imports vLLM's offloading managers from the unpacked wheel at `root`."""
    if not os.path.isfile(os.path.join(root, "vllm", "v1", "kv_offload", "cpu", "manager.py")):
        sys.exit(f"vllm_replay: no vllm/v1/kv_offload/cpu/manager.py under {root}")
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})
    sys.modules["torch"] = torch
    for pkg in (
        "vllm",
        "vllm.utils",
        "vllm.distributed",
        "vllm.distributed.kv_transfer",
        "vllm.distributed.kv_transfer.kv_connector",
        "vllm.distributed.kv_transfer.kv_connector.v1",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading",
    ):
        _bare_package(pkg, root)
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = _Logger
    sys.modules["vllm.logger"] = logger
    metrics = types.ModuleType("vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics")
    metrics.OffloadingConnectorStats = _StatsSink
    sys.modules[metrics.__name__] = metrics
    hints = types.ModuleType("vllm.v1.kv_hints")
    hints.KvHintsEnvelope = type("KvHintsEnvelope", (), {})
    sys.modules[hints.__name__] = hints
    region = types.ModuleType("vllm.v1.kv_offload.cpu.shared_offload_region")
    region.SharedOffloadRegion = _Region
    sys.modules[region.__name__] = region
    sys.path.insert(0, root)

    v = types.SimpleNamespace()
    v.base = importlib.import_module("vllm.v1.kv_offload.base")
    v.cpu = importlib.import_module("vllm.v1.kv_offload.cpu.manager")
    v.tiering = importlib.import_module("vllm.v1.kv_offload.tiering.manager")
    v.tbase = importlib.import_module("vllm.v1.kv_offload.tiering.base")
    return v


def make_mem_tier(v, counts):
    """The `mem` secondary tier, as a vLLM SecondaryTierManager."""
    base, tbase = v.base, v.tbase

    class MemTier(tbase.SecondaryTierManager):
        medium = base.Medium.CPU

        def __init__(self):
            super().__init__(None, _Region(1).create_kv_memoryview(), "mem")
            self.keys = set()
            self.pending = []

        def lookup(self, key, req_context):
            return base.LookupResult.HIT if key in self.keys else base.LookupResult.MISS

        def submit_store(self, job_metadata):
            self.keys.update(job_metadata.keys)
            counts["cascade_blocks"] += len(job_metadata.keys)
            self.pending.append(job_metadata.job_id)

        def submit_load(self, job_metadata):
            counts["promotion_blocks"] += len(job_metadata.keys)
            self.pending.append(job_metadata.job_id)

        def get_finished_jobs(self):
            done, self.pending = self.pending, []
            return [tbase.JobResult(job_id=j, success=True) for j in done]

        def has_pending_work(self):
            return bool(self.pending)

        def on_new_request(self, req_context):
            return base.RequestOffloadingContext()

        def drain_jobs(self):
            pass

    return MemTier()


def use_kvtier(v):
    """Puts kvtier's drop-in managers in the place of vLLM's."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from kvtier.vllm import compat

    v.cpu.CPUOffloadingManager = compat.CPUOffloadingManager
    v.tiering.CPUPrimaryTierOffloadingManager = compat.CPUPrimaryTierOffloadingManager
    v.tiering.TieringOffloadingManager = compat.TieringOffloadingManager


def read_workload(path):
    """[(req_id, [key bytes])] in file order."""
    requests = []
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split()
            if parts[0] != "R" or len(parts) != 3 + int(parts[2]):
                sys.exit(f"vllm_replay: bad workload line: {line[:80]}")
            requests.append((parts[1], [bytes.fromhex(k) for k in parts[3:]]))
    return requests


COUNTERS = (
    "requests steps manager_calls lookups hit_blocks stops_miss stops_pending "
    "blocks_stored rejected_stores blocks_evicted promotion_blocks cascade_blocks events"
).split()


def replay(v, args, requests):
    c = dict.fromkeys(COUNTERS, 0)
    base = v.base
    if args.tiers == "mem":
        primary = v.tiering.CPUPrimaryTierOffloadingManager(
            num_chunks=args.blocks,
            mmap_region=_Region(args.blocks),
            cache_policy=args.policy,
            enable_events=True,
        )
        m = v.tiering.TieringOffloadingManager(
            primary, [make_mem_tier(v, c)], tier_poll_interval_s=0
        )
    else:
        m = v.cpu.CPUOffloadingManager(
            num_chunks=args.blocks, cache_policy=args.policy, enable_events=True
        )
    HIT, MISS = base.LookupResult.HIT, base.LookupResult.MISS

    def drain():
        c["manager_calls"] += 1
        for ev in m.take_events():
            if ev.metadata_only:
                # The cleanup of a failed write: no public event (kvtier
                # announces no removal of a key never announced as stored).
                continue
            c["events"] += len(ev.keys)
            if ev.removed and ev.ownership is None:
                c["blocks_evicted"] += len(ev.keys)

    start, cpu_start = time.perf_counter(), time.process_time()
    for first in range(0, len(requests), args.batch):
        batch = requests[first : first + args.batch]
        c["steps"] += 1
        ctxs = []
        for name, keys in batch:
            ctx = base.ReqContext(req_id=name)
            if args.positions:
                for i, k in enumerate(keys):
                    ctx.set_offload_key_position(k, 16 * (i + 1))
            ctxs.append(ctx)
            c["manager_calls"] += 1
            m.on_new_request(ctx)
            c["requests"] += 1
        work = []
        for (name, keys), ctx in zip(batch, ctxs):
            h, stop = 0, HIT
            while h < len(keys):
                c["manager_calls"] += 1
                c["lookups"] += 1
                answer = m.lookup(keys[h], ctx)
                if answer is not HIT:
                    stop = answer
                    break
                h += 1
            if stop is not HIT and stop is not MISS:
                c["stops_pending"] += 1
                work.append((0, []))
                continue
            if h > 0:
                c["manager_calls"] += 2
                m.prepare_load(keys[:h], ctx)
                m.touch(keys[:h], ctx)
                c["hit_blocks"] += h
            stored = []
            if stop is MISS:
                c["stops_miss"] += 1
                c["manager_calls"] += 1
                out = m.prepare_store(keys[h:], ctx)
                if out is None:
                    c["rejected_stores"] += 1
                else:
                    stored = list(out.keys_to_store)
                    c["blocks_stored"] += len(stored)
            work.append((h, stored))
        c["manager_calls"] += 1
        m.on_schedule_end(
            base.ScheduleEndContext(new_req_ids=[n for n, _ in batch], preempted_req_ids=())
        )
        for (name, keys), ctx, (h, stored) in zip(batch, ctxs, work):
            if h > 0:
                c["manager_calls"] += 1
                m.complete_load(keys[:h], ctx)
            if stored:
                c["manager_calls"] += 1
                m.complete_store(stored, ctx, True)
            c["manager_calls"] += 1
            m.on_request_finished(ctx)
        drain()
    for _ in range(10):
        c["manager_calls"] += 1
        if not m.has_pending_work():
            break
        c["manager_calls"] += 1
        m.on_schedule_end(base.ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))
        drain()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    m.shutdown()
    calls = c["manager_calls"]
    c["wall_s"] = round(wall, 6)
    c["ns_per_call"] = round(wall * 1e9 / calls, 1) if calls else 0.0
    c["cpu_s"] = round(cpu, 6)
    c["cpu_ns_per_call"] = round(cpu * 1e9 / calls, 1) if calls else 0.0
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-root", required=True, help="directory holding the wheel's vllm/")
    p.add_argument("--workload", required=True)
    p.add_argument("--blocks", type=int, required=True)
    p.add_argument("--policy", choices=("lru", "arc"), default="lru")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tiers", choices=("none", "mem"), default="none")
    p.add_argument("--hit-pending", action="store_true")
    p.add_argument("--positions", action="store_true")
    p.add_argument("--managers", choices=("vllm", "kvtier"), default="vllm")
    p.add_argument(
        "--expected-out",
        metavar="FILE",
        help="also write the counters (no times) to FILE, as an expected file",
    )
    args = p.parse_args()
    if args.blocks < 1 or args.batch < 1:
        p.error("--blocks and --batch must be at least 1")
    v = load_vllm(os.path.abspath(args.vllm_root))
    if args.managers == "kvtier":
        use_kvtier(v)
    counts = replay(v, args, read_workload(args.workload))
    print(json.dumps(counts))
    if args.expected_out:
        with open(args.expected_out, "w") as f:
            f.write(json.dumps({k: counts[k] for k in COUNTERS}, indent=2) + "\n")


if __name__ == "__main__":
    main()
