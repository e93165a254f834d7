"""The C ABI, as cffi declares it from the library's own header.

The declarations come from ``kvtier.h`` (the header the library was built
with, bundled beside it): comments, preprocessor lines and C++ guards are
removed, every ``#define`` integer constant is evaluated and substituted,
and cffi's ABI mode opens ``libkvtier.so`` with no compiler involved.  So
Python calls exactly the functions a C engine calls, with the same
structs, and a header change needs no edit here.

Where the library and header are found, first match wins:

1. ``KVTIER_LIBRARY`` (a path to ``libkvtier.so``) and ``KVTIER_HEADER``
   (a path to ``kvtier.h``) in the environment;
2. the files installed with the package (``pip install ./python``);
3. a source checkout: ``target/release/libkvtier.so`` and
   ``include/kvtier.h`` of the repository holding this package.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

import cffi

__all__ = ["ffi", "lib", "CONSTANTS", "library_path", "header_path"]

_PACKAGE = Path(__file__).resolve().parent


def _locate(env: str, bundled: str, checkout: tuple[str, ...]) -> Path:
    explicit = os.environ.get(env)
    if explicit:
        return Path(explicit)
    candidate = _PACKAGE / bundled
    if candidate.is_file():
        return candidate
    source = _PACKAGE.parent.parent.joinpath(*checkout)
    if source.is_file():
        return source
    raise ImportError(
        f"kvtier: {bundled} not found (set {env}, install the package with "
        f"`pip install ./python`, or build the library with `cargo build --release`)"
    )


library_path = _locate("KVTIER_LIBRARY", "libkvtier.so", ("target", "release", "libkvtier.so"))
header_path = _locate("KVTIER_HEADER", "kvtier.h", ("include", "kvtier.h"))

_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Z_][A-Z0-9_]*)\s+(.+?)\s*$")


def _eval_int(expression: str) -> int | None:
    """The value of an integer constant expression of the header, or None."""
    try:
        tree = ast.parse(expression.replace("UL", "").replace("U", ""), mode="eval")
    except SyntaxError:
        return None
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop)
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        return None
    value = eval(compile(tree, "<kvtier.h>", "eval"), {"__builtins__": {}})  # noqa: S307
    return value if isinstance(value, int) else None


def _declarations(header: str) -> tuple[str, dict[str, int]]:
    """The header as cffi declarations, and its integer constants."""
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    constants: dict[str, int] = {}
    lines = []
    for line in text.splitlines():
        match = _DEFINE.match(line)
        if match:
            value = _eval_int(match.group(2))
            if value is not None:
                constants[match.group(1)] = value
            continue
        stripped = line.strip()
        if stripped.startswith("#") or stripped in ('extern "C" {', "}  ", "}"):
            continue
        lines.append(line)
    body = "\n".join(lines)
    body = body.replace('extern "C" {', "")
    # The closing brace of extern "C" sits alone after the last declaration.
    for name, value in constants.items():
        body = re.sub(rf"\b{name}\b", str(value), body)
    return body, constants


def _load() -> tuple[Any, Any, dict[str, int]]:
    ffi = cffi.FFI()
    declarations, constants = _declarations(header_path.read_text())
    ffi.cdef(declarations)
    library = ffi.dlopen(str(library_path))
    # Resolve every function now: cffi resolves a name under a lock that is
    # not reentrant, and a finalizer (``__del__`` freeing a handle) that ran
    # inside a resolution by the garbage collector would wait on it forever.
    for name in dir(library):
        getattr(library, name)
    return ffi, library, constants


ffi, lib, CONSTANTS = _load()


def _check_version() -> None:
    loaded = ffi.string(lib.kvtier_version()).decode()
    major, minor = CONSTANTS["KVTIER_VERSION_MAJOR"], CONSTANTS["KVTIER_VERSION_MINOR"]
    parts = loaded.split(".")
    if int(parts[0]) != major or (major == 0 and int(parts[1]) != minor):
        raise ImportError(
            f"kvtier: the library {library_path} is version {loaded}, "
            f"but the header {header_path} is {major}.{minor}"
        )


_check_version()
