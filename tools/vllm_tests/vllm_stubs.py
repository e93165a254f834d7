"""Imports vLLM 0.33's KV-offloading code without torch, CUDA or the rest of vLLM.

A pytest plugin (``-p vllm_stubs``) and a plain module (``install(root)``).
The offloading managers, their tests and the modules those import are pure
Python over numpy; what pulls in torch, the GPU code or the engine is
replaced before anything is imported:

* ``torch``: a stand-in over numpy (``torch.zeros(...).numpy()``, dtypes,
  the ``Tensor`` class for annotations);
* every ``vllm`` package is a bare package over the unpacked directory (its
  ``__init__`` not run), so importing ``vllm.v1.kv_offload.base`` runs
  that file and nothing else;
* the modules of ``REAL`` (and below them) are vLLM's own files;
* every other ``vllm`` module (the engine, its config, the platforms, the
  GPU worker, the shared region's torch code) is an automatic stand-in: any
  name imported from it is a placeholder class that can be subclassed,
  called, subscripted and used in annotations, and does nothing;
* ``vllm.logger`` is Python's logging.

The vLLM tree is the directory named by the ``VLLM_ROOT`` environment
variable (it holds ``vllm/`` from the wheel and ``tests/`` from the source
archive).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
import types

import numpy as np

# vLLM modules (and everything below them) that run their own code.
REAL = (
    "vllm.v1.kv_offload",
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading",
    "vllm.distributed.kv_transfer.kv_connector.v1.metrics",
    "vllm.v1.metrics.cache_hit_source",
    "vllm.utils.math_utils",
)
# Under REAL, but torch/GPU code: stand-ins all the same.
STUBBED = (
    "vllm.v1.kv_offload.cpu.gpu_worker",
    "vllm.v1.kv_offload.cpu.swap_blocks_triton",
    "vllm.v1.kv_offload.cpu.host_register",
    "vllm.v1.kv_offload.cpu.shared_offload_region",
    "vllm.v1.kv_offload.tiering.p2p",
    "vllm.v1.kv_offload.tiering.kvcr",
    "vllm.v1.kv_offload.tiering.obj",
)


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class _StubMeta(type):
    """Metaclass of the placeholders: every use answers another placeholder."""

    def __getattr__(cls, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__name__}.{name}")

    def __getitem__(cls, item):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False


class _Stub(metaclass=_StubMeta):
    """Base of the placeholders: instances accept anything and do nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub()

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Stub()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())


def _placeholder(name: str) -> type:
    return _StubMeta(name.rsplit(".", 1)[-1], (_Stub,), {"__module__": "stub"})


class _StubModule(types.ModuleType):
    """A stand-in module: every attribute is a placeholder class."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Logger(logging.LoggerAdapter):
    """vLLM's logger calls, on Python's logging."""

    def __init__(self, name: str):
        super().__init__(logging.getLogger(name), {})

    def warning_once(self, msg, *args, **kwargs):
        self.warning(msg, *args, **kwargs)

    def info_once(self, msg, *args, **kwargs):
        self.info(msg, *args, **kwargs)

    def debug_once(self, msg, *args, **kwargs):
        self.debug(msg, *args, **kwargs)


class _Tensor:
    """torch.Tensor stand-in over a numpy array."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def numpy(self) -> np.ndarray:
        return self._array

    @property
    def shape(self):
        return self._array.shape

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._array, name)


def _torch_module() -> types.ModuleType:
    torch = _StubModule("torch")
    torch.__path__ = []  # type: ignore[attr-defined]
    torch.Tensor = _Tensor  # type: ignore[attr-defined]
    dtypes = {
        "int8": np.int8,
        "uint8": np.uint8,
        "int16": np.int16,
        "int32": np.int32,
        "int64": np.int64,
        "float16": np.float16,
        "float32": np.float32,
        "float64": np.float64,
        "bfloat16": np.float16,
    }
    for name, dtype in dtypes.items():
        setattr(torch, name, dtype)
    torch.long = np.int64  # type: ignore[attr-defined]
    torch.float = np.float32  # type: ignore[attr-defined]
    torch.half = np.float16  # type: ignore[attr-defined]

    def zeros(*shape, dtype=np.float32, **_kwargs):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _Tensor(np.zeros(shape, dtype=dtype))

    def empty(*shape, dtype=np.float32, **_kwargs):
        return zeros(*shape, dtype=dtype)

    torch.zeros = zeros  # type: ignore[attr-defined]
    torch.empty = empty  # type: ignore[attr-defined]
    torch.from_numpy = _Tensor  # type: ignore[attr-defined]
    torch.cuda = _StubModule("torch.cuda")  # type: ignore[attr-defined]
    torch.cuda.is_available = lambda: False  # type: ignore[attr-defined]
    return torch


class _Loader(importlib.abc.Loader):
    def __init__(self, make):
        self._make = make

    def create_module(self, spec):
        return self._make(spec.name)

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    """Decides, for torch and every vllm module, what is imported."""

    def __init__(self, root: str):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            if name == "torch":
                return importlib.machinery.ModuleSpec(name, _Loader(lambda n: _torch_module()))
            return self._stub_spec(name)
        if name != "vllm" and not name.startswith("vllm."):
            return None
        if name == "vllm.logger":
            return importlib.machinery.ModuleSpec(name, _Loader(self._logger))
        directory = os.path.join(self.root, *name.split("."))
        real = _under(name, REAL) and not _under(name, STUBBED)
        if os.path.isdir(directory) and (real or any(p.startswith(name + ".") for p in REAL)):
            # A package on the way to (or inside) the real code: bare.
            spec = importlib.machinery.ModuleSpec(name, _Loader(types.ModuleType), is_package=True)
            spec.submodule_search_locations = [directory]
            return spec
        if real:
            return None  # the ordinary path finder loads the file
        return self._stub_spec(name)

    @staticmethod
    def _stub_spec(name):
        def make(n):
            module = _StubModule(n)
            module.__path__ = []  # type: ignore[attr-defined]
            return module

        return importlib.machinery.ModuleSpec(name, _Loader(make), is_package=True)

    @staticmethod
    def _logger(name):
        module = types.ModuleType(name)
        module.init_logger = _Logger  # type: ignore[attr-defined]
        return module


_installed: str | None = None


def install(root: str) -> None:
    """Installs the stand-ins for the vLLM tree at `root` (idempotent)."""
    global _installed
    root = os.path.abspath(root)
    if _installed == root:
        return
    if _installed is not None:
        raise RuntimeError(f"vLLM stand-ins already installed for {_installed}")
    if not os.path.isfile(os.path.join(root, "vllm", "v1", "kv_offload", "base.py")):
        raise RuntimeError(f"no vllm/v1/kv_offload/base.py under {root}")
    sys.meta_path.insert(0, _Finder(root))
    if root not in sys.path:
        sys.path.insert(0, root)
    _installed = root


def pytest_load_initial_conftests(early_config, parser, args):
    """Installs the stand-ins before vLLM's conftest files are imported."""
    root = os.environ.get("VLLM_ROOT")
    if not root:
        raise RuntimeError("VLLM_ROOT must name the unpacked vLLM tree")
    install(root)
