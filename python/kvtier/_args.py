"""Clear errors for Python values a C parameter or struct field cannot take.

cffi refuses a value of the wrong type or range with a message that names
neither the call nor the parameter (``an integer is required``, ``int too
big to convert``).  The calls and struct fields that take a caller's
values go through here instead: `explain` turns such a refusal into a
``TypeError`` (wrong type) or ``OverflowError`` (an integer out of the C
type's range) naming the C function and the parameter, as the header names
them; `fill` sets struct fields from keyword arguments the same way, and
refuses an unknown name with a ``TypeError`` listing the known ones.  Only
the error path pays for this: a call that succeeds never comes here.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ._ffi import ffi, header_path, lib
from .errors import encode_str

__all__ = ["explain", "fill", "check_value", "slot_index", "int_list", "explain_items"]

_DECLARATION = re.compile(r"\b(kvtier_\w+)\s*\(([^()]*)\)\s*;")
_names: dict[int, str] | None = None
_params: dict[str, list[str]] | None = None


def _function_names() -> dict[int, str]:
    """The address of every function of ``lib``, to its name."""
    global _names
    if _names is None:
        names = {}
        for name in dir(lib):
            value = getattr(lib, name)
            if isinstance(value, ffi.CData) and ffi.typeof(value).kind == "function":
                names[int(ffi.cast("uintptr_t", value))] = name
        _names = names
    return _names


def _parameter_names(function: str) -> list[str]:
    """The parameter names of `function` in the header (empty if unknown)."""
    global _params
    if _params is None:
        text = re.sub(r"/\*.*?\*/", "", header_path.read_text(), flags=re.S)
        params = {}
        for match in _DECLARATION.finditer(text):
            names = []
            for parameter in match.group(2).split(","):
                words = re.findall(r"\w+", parameter)
                names.append(words[-1] if words else "")
            params[match.group(1)] = names
        _params = params
    return _params.get(function, [])


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _integer_range(ctype: Any) -> tuple[int, int]:
    bits = ffi.sizeof(ctype) * 8
    if int(ffi.cast(ctype, -1)) < 0:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def check_value(ctype: Any, value: Any, where: str) -> Exception | None:
    """The error a C value of type `ctype` made from `value` would raise,
    worded for `where`, or None if `value` fits."""
    if isinstance(ctype, str):
        ctype = ffi.typeof(ctype)
    if ctype.kind == "enum":
        ctype = ffi.typeof("int")
    if ctype.kind != "primitive":
        if ctype.kind == "pointer" and isinstance(value, str):
            return TypeError(f"{where}: expected bytes or a C pointer ({ctype.cname}), got str")
        return None
    name = ctype.cname
    if name == "_Bool":
        if value is True or value is False or type(value).__name__ == "bool_":
            return None
        try:
            number = operator.index(value)
        except TypeError:
            return TypeError(f"{where}: expected a bool, got {_type_name(value)}")
        if number in (0, 1):
            return None
        return TypeError(f"{where}: expected a bool, got {_type_name(value)} {number}")
    if name in ("float", "double"):
        try:
            float(value)
        except (TypeError, ValueError):
            return TypeError(f"{where}: expected a number, got {_type_name(value)}")
        return None
    if name == "char":
        return None
    try:
        number = operator.index(value)
    except TypeError:
        return TypeError(f"{where}: expected an int, got {_type_name(value)}")
    low, high = _integer_range(ctype)
    if not low <= number <= high:
        return OverflowError(f"{where}: {number} is out of range {low}..{high} ({name})")
    return None


def explain(fn: Any, args: Iterable[Any], error: BaseException) -> BaseException:
    """The clear error for cffi's `error` from calling `fn` with `args`
    (the first argument its parameter cannot take); `error` itself if no
    argument explains it."""
    try:
        function = _function_names().get(int(ffi.cast("uintptr_t", fn)), "a kvtier call")
        names = _parameter_names(function)
        for i, (ctype, value) in enumerate(zip(ffi.typeof(fn).args, args)):
            name = names[i] if i < len(names) and names[i] else f"argument {i + 1}"
            problem = check_value(ctype, value, f"{function}: {name}")
            if problem is not None:
                return problem
    except Exception:  # explaining must never hide the original error
        return error
    return error


def fill(
    struct: Any,
    values: Mapping[str, Any],
    what: str,
    *,
    skip: Iterable[str] = ("struct_size",),
    keep: list[Any] | None = None,
) -> None:
    """Sets the fields `values` names on `struct` (a cffi struct pointer):
    an unknown name (or one in `skip`) is a ``TypeError`` listing the
    others, a value the field cannot take the error `check_value` gives.
    With `keep`, a ``str`` given for a ``const char *`` field becomes a
    NUL-terminated copy, appended to `keep` (which the caller holds until
    the C call is made)."""
    fields = dict(ffi.typeof(struct).item.fields)
    skipped = set(skip)
    for name, value in values.items():
        field = fields.get(name) if isinstance(name, str) and name not in skipped else None
        if field is None:
            known = ", ".join(n for n in fields if n not in skipped)
            raise TypeError(f"{what}: unknown option {name!r} (the options are: {known})")
        if keep is not None and isinstance(value, str) and field.type.kind == "pointer" and field.type.item.cname == "char":
            keep.append(ffi.new("char[]", encode_str(value, f"{what}: {name}")))
            value = keep[-1]
        problem = check_value(field.type, value, f"{what}: {name}")
        if problem is not None:
            raise problem
        try:
            setattr(struct, name, value)
        except (TypeError, OverflowError, ValueError) as e:
            raise TypeError(f"{what}: {name}: cannot take a {_type_name(value)} ({field.type.cname})") from e


def slot_index(slot: Any, count: int) -> int:
    """`slot` as a slot number below `count`: a ``TypeError`` unless it is
    an int (a bool is not), an ``IndexError`` outside ``0..count - 1``."""
    if isinstance(slot, bool):
        raise TypeError("slot: expected an int, got bool")
    try:
        index = operator.index(slot)
    except TypeError:
        raise TypeError(f"slot: expected an int, got {_type_name(slot)}") from None
    if not 0 <= index < count:
        raise IndexError(f"slot {index} out of range: there are {count} slots, 0..{count - 1}")
    return index


def int_list(values: Any, what: str) -> list[Any]:
    """`values` as a list, a ``TypeError`` naming `what` unless it is an
    iterable (a str or bytes is not a list of numbers)."""
    if isinstance(values, (str, bytes, bytearray)):
        raise TypeError(f"{what}: expected a sequence of ints, got {_type_name(values)}")
    try:
        return list(values)
    except TypeError:
        raise TypeError(f"{what}: expected a sequence of ints, got {_type_name(values)}") from None


def explain_items(values: list[Any], ctype: str, what: str, error: BaseException) -> BaseException:
    """The clear error for the first of `values` a C `ctype` cannot take
    (``positions[2]: expected an int, got float``); `error` if none."""
    for i, value in enumerate(values):
        problem = check_value(ctype, value, f"{what}[{i}]")
        if problem is not None:
            return problem
    return error
