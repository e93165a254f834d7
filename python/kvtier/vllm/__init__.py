"""kvtier inside vLLM 0.33: an offloading spec loaded by name (no patch to
vLLM), whose scheduler side is vLLM's ``OffloadingManager`` interface over
one kvtier manager and whose worker side maps the same region through
kvtier.  See ``docs/vllm.md`` in the repository.

* `kvtier.vllm.spec.KvtierOffloadingSpec`: the spec
  (``"spec_name": "KvtierOffloadingSpec", "spec_module_path":
  "kvtier.vllm.spec"``);
* `kvtier.vllm.manager.KvtierOffloadingManager`: the manager;
* `kvtier.vllm.compat`: kvtier's managers under vLLM's own constructors
  (``CPUOffloadingManager``, ``CPUPrimaryTierOffloadingManager``,
  ``TieringOffloadingManager``);
* `kvtier.vllm.region.KvtierSharedRegion`: the region as vLLM's CPU worker
  uses it.

Importing a submodule imports vLLM's offloading base classes (vLLM must be
installed); this package itself imports nothing of vLLM.
"""
