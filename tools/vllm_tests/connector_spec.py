"""pytest plugin: vLLM's offloading-connector tests, each side's spec recorded.

Loaded as ``-p connector_spec`` by ``run_connector.py``.  The side is the
environment variable ``KVTIER_CONNECTOR_SIDE``:

* ``vllm``: vLLM's tests as they are;
* ``kvtier``: wherever a test names one of vLLM's own specs, kvtier's spec
  is loaded by name instead, as a user's configuration names it:

  - vLLM's ``OffloadingSpecFactory.get_spec_cls`` reads an extra config that
    names ``CPUOffloadingSpec`` (vLLM's default) or
    ``TieringOffloadingSpec`` (and no ``spec_module_path``) as naming
    ``{"spec_name": "KvtierOffloadingSpec", "spec_module_path":
    "kvtier.vllm.spec"}``: the factory then imports kvtier's spec through
    its own out-of-tree path.  The spec reads the rest of the extra config
    unchanged;
  - in the test modules (after collection, so vLLM's modules stay vLLM's),
    the names ``CPUOffloadingSpec`` and ``TieringOffloadingSpec`` that a
    test constructs directly are kvtier's spec, and ``CPUOffloadingManager``
    is ``kvtier.vllm.compat.CPUOffloadingManager`` (vLLM's constructor over
    a kvtier manager).

vLLM's test files are not changed.  On both sides the plugin records, per
item, which real specs and managers the item used (built one, or had
vLLM's factory resolve a spec class; setup, call and teardown), into the
JSON file named by ``KVTIER_CONNECTOR_USED``: most items run the connector
over the tests' own ``MockOffloadingSpec`` (a mock manager) and use none,
so they run the same code on both sides.
"""

from __future__ import annotations

import importlib
import json
import os
from collections import Counter

import pytest

SIDE = os.environ.get("KVTIER_CONNECTOR_SIDE", "vllm")
KVTIER_SPEC = {"spec_name": "KvtierOffloadingSpec", "spec_module_path": "kvtier.vllm.spec"}
VLLM_SPECS = ("CPUOffloadingSpec", "TieringOffloadingSpec")

# Classes whose construction is recorded: (module, class name, the method
# every construction runs; kvtier's manager is built by `create` or by the
# compat constructors, both through `_setup`).
RECORDED = (
    ("vllm.v1.kv_offload.cpu.spec", "CPUOffloadingSpec", "__init__"),
    ("vllm.v1.kv_offload.tiering.spec", "TieringOffloadingSpec", "__init__"),
    ("vllm.v1.kv_offload.cpu.manager", "CPUOffloadingManager", "__init__"),
    ("vllm.v1.kv_offload.tiering.manager", "TieringOffloadingManager", "__init__"),
    ("kvtier.vllm.spec", "KvtierOffloadingSpec", "__init__"),
    ("kvtier.vllm.manager", "KvtierOffloadingManager", "_setup"),
)

_uses: Counter[str] = Counter()
_used: dict[str, list[str]] = {}


def _record(cls: type, label: str, method: str) -> None:
    original = cls.__dict__[method]

    def recorded(self, *args, **kwargs):
        _uses[label] += 1
        return original(self, *args, **kwargs)

    setattr(cls, method, recorded)


def _spec_cls(original):
    """vLLM's ``get_spec_cls``, recording the spec class it resolves (a
    test may use a spec's class methods without building one); on kvtier's
    side, with kvtier's spec named in the place of vLLM's."""

    def get_spec_cls(cls, extra_config):
        name = extra_config.get("spec_name", "CPUOffloadingSpec")
        if SIDE == "kvtier" and name in VLLM_SPECS and extra_config.get("spec_module_path") is None:
            extra_config = {**extra_config, **KVTIER_SPEC}
        spec_cls = original.__func__(cls, extra_config)
        if spec_cls.__name__ in VLLM_SPECS + (KVTIER_SPEC["spec_name"],):
            _uses[spec_cls.__name__] += 1
        return spec_cls

    return classmethod(get_spec_cls)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    for module_name, class_name, method in RECORDED:
        _record(getattr(importlib.import_module(module_name), class_name), class_name, method)
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    OffloadingSpecFactory.get_spec_cls = _spec_cls(OffloadingSpecFactory.__dict__["get_spec_cls"])


def pytest_collection_modifyitems(session, config, items):
    if SIDE != "kvtier":
        return
    from kvtier.vllm import compat
    from kvtier.vllm.spec import KvtierOffloadingSpec

    replacements = {
        "CPUOffloadingSpec": KvtierOffloadingSpec,
        "TieringOffloadingSpec": KvtierOffloadingSpec,
        "CPUOffloadingManager": compat.CPUOffloadingManager,
    }
    seen = set()
    for item in items:
        module = getattr(item, "module", None)
        if module is None or module.__name__ in seen:
            continue
        seen.add(module.__name__)
        for name, replacement in replacements.items():
            if name in vars(module):
                setattr(module, name, replacement)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = Counter(_uses)
    yield
    built = sorted((_uses - before).keys())
    if built:
        _used[item.nodeid] = built


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("KVTIER_CONNECTOR_USED")
    if path:
        with open(path, "w") as out:
            json.dump({"side": SIDE, "items": _used}, out, indent=1, sort_keys=True)


def pytest_report_header(config):
    if SIDE == "kvtier":
        return "kvtier's spec in the place of vLLM's CPUOffloadingSpec and TieringOffloadingSpec"
    return "vLLM's own specs"
