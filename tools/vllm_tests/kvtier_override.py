"""pytest plugin: vLLM's own manager tests run against kvtier's managers.

Loaded after ``vllm_stubs`` (``-p vllm_stubs -p kvtier_override``), before
any test module is imported, it replaces in vLLM's modules the manager
classes the tests construct by kvtier's drop-in classes
(``kvtier.vllm.compat``), which take the same arguments and run one
kvtier manager each, through the C API:

* ``vllm.v1.kv_offload.cpu.manager.CPUOffloadingManager``;
* ``vllm.v1.kv_offload.tiering.manager.CPUPrimaryTierOffloadingManager``
  and ``TieringOffloadingManager``.

vLLM's test files themselves are not changed: ``from ... import
CPUOffloadingManager`` in a test module then finds kvtier's class.
"""

from __future__ import annotations

import importlib

import pytest

REPLACED = {
    "vllm.v1.kv_offload.cpu.manager": ("CPUOffloadingManager",),
    "vllm.v1.kv_offload.tiering.manager": ("CPUPrimaryTierOffloadingManager", "TieringOffloadingManager"),
}


@pytest.hookimpl(trylast=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Swaps the classes in once the stand-ins are installed."""
    from kvtier.vllm import compat

    for module_name, names in REPLACED.items():
        module = importlib.import_module(module_name)
        for name in names:
            setattr(module, name, getattr(compat, name))


def pytest_report_header(config):
    import kvtier

    return f"kvtier {kvtier.__version__}: vLLM's managers replaced by kvtier.vllm.compat"
