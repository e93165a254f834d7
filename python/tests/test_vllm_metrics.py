"""kvtier's spec under vLLM 0.33's own offloading metrics (``OffloadPromMetrics``
of the offloading connector, run from the unpacked wheel without torch):
the families it registers and publishes are those of vLLM's CPU spec and
tiering spec, with the same types, labels and buckets, with or without
secondary tiers.

Needs the unpacked vLLM 0.33 wheel (``make test-vllm`` fetches it into
build/vllm; or ``VLLM_ROOT``) and ``prometheus_client``; skipped without.
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import unpacked_vllm_wheel

REPO = Path(__file__).resolve().parents[2]
VLLM_ROOT = unpacked_vllm_wheel()
sys.path.insert(0, str(REPO / "tools" / "vllm_tests"))
import vllm_stubs  # noqa: E402

from conftest import import_or_fail, keys  # noqa: E402

prometheus_client = import_or_fail("prometheus_client")

# Modules that import vLLM (or its torch stand-in): imported under the
# stand-ins, and forgotten after this file's tests, so that the other
# files' tests import no stand-in (kvtier.vllm.region's torch among them).
_UNDER_STUBS = ("torch", "vllm", "kvtier.vllm.spec", "kvtier.vllm.manager", "kvtier.vllm.metrics",
                "kvtier.vllm.tiers", "kvtier.vllm.compat", "kvtier.vllm._vllm")


def _under_stubs(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in _UNDER_STUBS)


@pytest.fixture(scope="module", autouse=True)
def vllm():
    vllm_stubs.install(str(VLLM_ROOT))
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadPromMetrics
    from vllm.v1.kv_offload import base
    from vllm.v1.kv_offload.tiering import base as tiering_base

    from kvtier.vllm.manager import KvtierOffloadingManager
    from kvtier.vllm.spec import KvtierOffloadingSpec

    g = globals()
    g.update(
        OffloadPromMetrics=OffloadPromMetrics,
        LookupResult=base.LookupResult,
        ReqContext=base.ReqContext,
        ScheduleEndContext=base.ScheduleEndContext,
        JobResult=tiering_base.JobResult,
        M=tiering_base.TieringOffloadingMetrics,
        KvtierOffloadingManager=KvtierOffloadingManager,
        KvtierOffloadingSpec=KvtierOffloadingSpec,
        HeldTier=held_tier(tiering_base.SecondaryTierManager),
    )
    yield
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, vllm_stubs._Finder)]
    vllm_stubs._installed = None
    for name in [n for n in sys.modules if _under_stubs(n)]:
        del sys.modules[name]


KVTIER = {"spec_name": "KvtierOffloadingSpec", "spec_module_path": "kvtier.vllm.spec", "cpu_bytes_to_use": 1 << 20}
LEGACY = ("vllm:kv_offload_total_bytes", "vllm:kv_offload_total_time", "vllm:kv_offload_size")


def prom(extra_config: dict):
    """vLLM's connector metrics for this spec configuration, on a registry of their own."""
    registry = prometheus_client.CollectorRegistry()
    types = {
        cls: functools.partial(cls, registry=registry)
        for cls in (prometheus_client.Counter, prometheus_client.Gauge, prometheus_client.Histogram)
    }
    config = SimpleNamespace(kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra_config))
    return OffloadPromMetrics(config, types, ["engine"], {0: ["0"]}), registry


def families(registry) -> dict[str, str]:
    return {family.name: family.type for family in registry.collect()}


def shape(metadata) -> dict[str, tuple]:
    return {
        name: (type(m).__name__, tuple(m.labelnames), getattr(m, "buckets", None), m.documentation)
        for name, m in metadata.items()
    }


@pytest.mark.parametrize("store_threshold", [0, 2])
def test_every_family_of_vllms_cpu_and_tiering_specs_without_secondary_tiers(store_threshold):
    kvtier, kvtier_registry = prom({**KVTIER, "store_threshold": store_threshold})
    cpu, cpu_registry = prom({"store_threshold": store_threshold})
    tiering, tiering_registry = prom({"spec_name": "TieringOffloadingSpec", "store_threshold": store_threshold})
    assert kvtier._spec_cls is KvtierOffloadingSpec
    own = shape(kvtier._offloading_metric_metadata)
    wanted = shape({**cpu._offloading_metric_metadata, **tiering._offloading_metric_metadata})
    # The info family's labels are the spec's configuration keys: the CPU
    # spec's, as there is no secondary tier.
    info = "vllm:kv_offload_config_info"
    assert own.pop(info) == shape(cpu._offloading_metric_metadata)[info]
    wanted.pop(info)
    assert own == wanted
    assert M.ACTIVE_PROMOTION_JOBS in own and M.ACTIVE_CASCADE_JOBS in own
    assert families(kvtier_registry) == {**families(cpu_registry), **families(tiering_registry)}


def test_legacy_transfer_families_are_published():
    kvtier, registry = prom(KVTIER)
    assert kvtier._observe_deprecated_metrics
    kvtier.observe(
        {
            "types": {"vllm:kv_offload_load_bytes": "counter", "vllm:kv_offload_store_size": "histogram"},
            "data": {"vllm:kv_offload_load_bytes": {(): 4096}, "vllm:kv_offload_store_size": {(): [2e6]}},
        }
    )
    labels = {"engine": "0", "transfer_type": "CPU_to_GPU"}
    assert registry.get_sample_value("vllm:kv_offload_total_bytes_total", labels) == 4096
    labels["transfer_type"] = "GPU_to_CPU"
    assert registry.get_sample_value("vllm:kv_offload_size_count", labels) == 1
    assert set(LEGACY) <= set(families(registry))


def test_manager_without_secondary_tiers_reports_the_primary_tiers_lookups():
    metrics, registry = prom(KVTIER)
    manager = KvtierOffloadingManager.create(8, tier_metrics=True)
    ctx = ReqContext(req_id="a")
    manager.on_new_request(ctx)
    stored = keys(2)
    output = manager.prepare_store(stored, ctx)
    manager.complete_store(output.keys_to_store, ctx)
    assert [manager.lookup(k, ctx) for k in keys(3)] == [LookupResult.HIT, LookupResult.HIT, LookupResult.MISS]
    metrics.observe(manager.get_stats().data)
    primary = {"engine": "0", "tier": "0:primary"}
    assert registry.get_sample_value(M.CHUNK_QUERIES + "_total", primary) == 3
    assert registry.get_sample_value(M.CHUNK_HITS + "_total", primary) == 2
    assert registry.get_sample_value(M.LOOKUP_SYNC_DELAY + "_count", primary) == 3
    assert manager.config_info() == [manager._config_info]
    assert manager.secondary_tiers == []
    manager.shutdown()


def held_tier(base: type) -> type:
    """A secondary tier class (over vLLM's `base`) that holds every job
    until `finish` is called."""

    class HeldTier(base):

        def __init__(self):
            super().__init__(
                offloading_spec=SimpleNamespace(), primary_kv_view=memoryview(bytearray(8)), tier_type="held"
            )
            self.jobs = []
            self.done = []

        def lookup(self, key, req_context):
            return LookupResult.MISS

        def submit_store(self, job_metadata):
            self.jobs.append(job_metadata)

        def submit_load(self, job_metadata):
            self.jobs.append(job_metadata)

        def finish(self, success):
            self.done.extend(JobResult(job_id=job.job_id, success=success) for job in self.jobs)
            self.jobs = []

        def get_finished_jobs(self):
            done, self.done = self.done, []
            return done

        def on_new_request(self, req_context):
            return None

        def drain_jobs(self):
            pass

    return HeldTier


def test_active_cascade_jobs_and_primary_read_usage_per_tier():
    metrics, registry = prom(KVTIER)
    tier = HeldTier()
    manager = KvtierOffloadingManager.create(8, vllm_tiers=[tier], tier_metrics=True)
    assert manager.secondary_tiers == [tier]
    ctx = ReqContext(req_id="a")
    manager.on_new_request(ctx)
    output = manager.prepare_store(keys(2), ctx)
    manager.complete_store(output.keys_to_store, ctx)
    end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
    manager.on_schedule_end(end)
    assert len(tier.jobs) == 1
    label = {"engine": "0", "tier": "1:held"}

    def gauges():
        metrics.observe(manager.get_stats().data)
        return (
            registry.get_sample_value(M.ACTIVE_CASCADE_JOBS, label),
            registry.get_sample_value(M.ACTIVE_PROMOTION_JOBS, label),
            registry.get_sample_value(M.PRIMARY_READ_USAGE_PERC, label),
            registry.get_sample_value(M.PRIMARY_WRITE_USAGE_PERC, label),
        )

    assert gauges() == (1, 0, 2 / 8, 0)
    tier.finish(success=False)
    manager.on_schedule_end(end)
    while manager.has_pending_work():
        manager.on_schedule_end(end)
    assert gauges() == (0, 0, 0, 0)
    assert registry.get_sample_value(M.CASCADE_JOB_FAILURES + "_total", label) == 1
    manager.on_request_finished(ctx)
    manager.shutdown()


def test_built_in_tier_reports_its_writes_under_its_label(tmp_path, region_name):
    import kvtier

    metrics, registry = prom({**KVTIER, "kvtier_tiers": [{"type": "fs", "directory": str(tmp_path)}]})
    region = kvtier.Region(region_name, 8, 4096, directory=str(tmp_path))
    manager = KvtierOffloadingManager.create(
        8, builtin_tiers=[{"type": "fs", "directory": str(tmp_path)}], region=region, tier_metrics=True
    )
    ctx = ReqContext(req_id="a")
    manager.on_new_request(ctx)
    output = manager.prepare_store(keys(2), ctx)
    manager.complete_store(output.keys_to_store, ctx)
    end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
    manager.on_schedule_end(end)
    for _ in range(1000):  # the fs tier writes on its own threads
        if not manager.has_pending_work():
            break
        time.sleep(0.01)
        manager.on_schedule_end(end)
    assert not manager.has_pending_work()
    metrics.observe(manager.get_stats().data)
    label = {"engine": "0", "tier": "1:fs"}
    assert registry.get_sample_value(M.WRITE_BYTES + "_total", label) == 2 * 4096
    assert registry.get_sample_value(M.ACTIVE_CASCADE_JOBS, label) == 0
    assert registry.get_sample_value(M.PRIMARY_READ_USAGE_PERC, label) == 0
    assert [info["tier"] for info in manager.config_info()] == ["0:primary", "1:fs"]
    manager.on_request_finished(ctx)
    manager.shutdown()
    region.close()
