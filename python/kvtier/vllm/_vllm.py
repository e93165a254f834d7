"""The vLLM 0.33 names kvtier.vllm builds on, imported once.

Importing this module imports vLLM's offloading base classes (pure Python
over numpy); everything else of vLLM stays unimported.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (  # noqa: F401
    OffloadingConnectorStats,
)
from vllm.v1.kv_offload.base import (  # noqa: F401
    LoadStoreSpec,
    Locality,
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadingManager,
    OffloadingSpec,
    OffloadKey,
    OffloadPolicy,
    PrepareStoreOutput,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
    TierFilter,
)
from vllm.v1.kv_offload.cpu.common import (  # noqa: F401
    CPULoadStoreSpec,
    CPUOffloadingInfo,
    CPUOffloadingMetrics,
)
from vllm.v1.kv_offload.tiering.base import (  # noqa: F401
    JobResult,
    SecondaryTierManager,
    TieringOffloadingMetrics,
    TransferJob,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource  # noqa: F401
