"""The binding layer: declarations from the header, status codes, errors."""

import re

import pytest

import kvtier
from kvtier._ffi import CONSTANTS, ffi, header_path, lib
from kvtier.errors import Status


def test_status_enum_is_the_headers():
    declared = dict(ffi.typeof("kvtier_status").relements)
    assert {s.name: int(s) for s in Status} == {
        name.removeprefix("KVTIER_STATUS_"): value for name, value in declared.items()
    }


def test_version_matches_the_header_and_cargo():
    cargo = (header_path.parent.parent / "Cargo.toml")
    assert kvtier.library_version().split(".")[:2] == [
        str(CONSTANTS["KVTIER_VERSION_MAJOR"]),
        str(CONSTANTS["KVTIER_VERSION_MINOR"]),
    ]
    if cargo.is_file():
        version = re.search(r'^version = "([^"]+)"', cargo.read_text(), re.M).group(1)
        assert kvtier.__version__ == version


def test_a_failed_call_raises_with_status_and_message():
    with pytest.raises(kvtier.KvtierError) as info:
        kvtier.Primary(0)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "capacity" in info.value.message
    assert "kvtier_primary_new" in str(info.value)


def test_every_declared_function_resolves():
    names = [n for n in dir(lib) if n.startswith("kvtier_") and callable(getattr(lib, n))]
    assert "kvtier_manager_request_begin" in names
    assert "kvtier_region_new" in names
