"""Builds the kvtier Python package: runs cargo on the repository this
directory belongs to and bundles ``libkvtier.so`` with the header it was
built from (the bindings declare the C API from that header).

Environment:

* ``KVTIER_CARGO`` (default ``cargo``) and ``KVTIER_CARGO_FEATURES``
  (default ``redis-tier,redis-tls``, the features of ``make``): the cargo
  build;
* ``KVTIER_PREBUILT_LIBRARY``: a ``libkvtier.so`` to bundle instead of
  building one (it must match ``include/kvtier.h``);
* ``CARGO_TARGET_DIR``: where cargo builds, as usual.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _version() -> str:
    cargo = (REPO / "Cargo.toml").read_text()
    match = re.search(r'^version = "([^"]+)"', cargo, re.M)
    if not match:
        raise RuntimeError("no version in Cargo.toml")
    return match.group(1)


def _library() -> Path:
    prebuilt = os.environ.get("KVTIER_PREBUILT_LIBRARY")
    if prebuilt:
        return Path(prebuilt)
    cargo = os.environ.get("KVTIER_CARGO", "cargo")
    features = os.environ.get("KVTIER_CARGO_FEATURES", "redis-tier,redis-tls")
    command = [cargo, "build", "--release", "--lib"]
    if features:
        command += ["--features", features]
    subprocess.run(command, cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "release" / "libkvtier.so"


class BuildWithLibrary(build_py):
    """build_py, plus the library and its header copied into the package."""

    def run(self) -> None:
        super().run()
        if not (REPO / "Cargo.toml").is_file():
            raise RuntimeError(f"{REPO} is not the kvtier repository (no Cargo.toml)")
        destination = Path(self.build_lib) / "kvtier"
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_library(), destination / "libkvtier.so")
        shutil.copyfile(REPO / "include" / "kvtier.h", destination / "kvtier.h")


class BinaryDistribution(Distribution):
    """The wheel carries a native library: platform-specific, not pure."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    version=_version(),
    cmdclass={"build_py": BuildWithLibrary},
    distclass=BinaryDistribution,
)
