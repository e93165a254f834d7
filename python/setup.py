"""Builds the kvtier Python package: runs cargo on the repository this
directory belongs to and bundles ``libkvtier.so`` with the header it was
built from (the bindings declare the C API from that header).

Environment:

* ``KVTIER_CARGO`` (default ``cargo``) and ``KVTIER_CARGO_FEATURES``
  (default ``redis-tier,redis-tls``, the features of ``make``): the cargo
  build;
* ``KVTIER_PREBUILT_LIBRARY``: a ``libkvtier.so`` to bundle instead of
  building one (it must match ``include/kvtier.h``);
* ``CARGO_TARGET_DIR``: where cargo builds, as usual;
* ``KVTIER_BUILD_PROGRESS``: ``tty`` (default) shows cargo's progress on
  the terminal even while pip holds back the build's output (pip shows it
  only with ``-v``); ``stderr`` leaves it in the build's standard error;
* ``KVTIER_STRIP`` (default ``strip``): the program that strips the
  bundled copy of the library (``--strip-unneeded``: about 4 MB instead of
  about 34 MB with the debug information the release build keeps for
  profiling); empty bundles it unstripped.  The library under
  ``target/`` is never changed.

The wheel holds no Python extension (cffi reads the library at run time),
so it is tagged ``py3-none-<platform>``: one wheel for every Python 3.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Optional

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1: the wheel package's
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _version() -> str:
    cargo = (REPO / "Cargo.toml").read_text()
    match = re.search(r'^version = "([^"]+)"', cargo, re.M)
    if not match:
        raise RuntimeError("no version in Cargo.toml")
    return match.group(1)


def _progress() -> Optional[IO[str]]:
    """The terminal, when the build's standard error is not one (pip holds
    the build's output back) and there is a terminal; else None (standard
    error)."""
    if os.environ.get("KVTIER_BUILD_PROGRESS", "tty") != "tty" or sys.stderr.isatty():
        return None
    try:
        tty = open("/dev/tty", "w")
    except OSError:  # no controlling terminal: a CI job, a daemon
        return None
    tty.write("\n")  # off pip's spinner line
    return tty


def _say(stream: Optional[IO[str]], text: str) -> None:
    print(f"kvtier: {text}", file=stream or sys.stderr, flush=True)


def _library(stream: Optional[IO[str]]) -> Path:
    prebuilt = os.environ.get("KVTIER_PREBUILT_LIBRARY")
    if prebuilt:
        _say(stream, f"bundling {prebuilt} (KVTIER_PREBUILT_LIBRARY)")
        return Path(prebuilt)
    cargo = os.environ.get("KVTIER_CARGO", "cargo")
    features = os.environ.get("KVTIER_CARGO_FEATURES", "redis-tier,redis-tls")
    # The C crate of the workspace builds libkvtier.so (crates/kvtier-capi).
    command = [cargo, "build", "--release", "-p", "kvtier-capi", "--lib"]
    if features:
        command += ["--features", features]
    _say(stream, f"{' '.join(command)} in {REPO} (a few minutes the first time)")
    # cargo writes its progress to standard error: the terminal's progress
    # bar when it is given the terminal.
    subprocess.run(command, cwd=REPO, check=True, stderr=stream)
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
        stream = _progress()
        try:
            library = destination / "libkvtier.so"
            shutil.copyfile(_library(stream), library)
            _strip(library, stream)
            shutil.copyfile(REPO / "include" / "kvtier.h", destination / "kvtier.h")
        finally:
            if stream is not None:
                stream.close()


def _strip(library: Path, stream: Optional[IO[str]]) -> None:
    """Strips the bundled copy of the library (`KVTIER_STRIP`)."""
    before = library.stat().st_size
    strip = os.environ.get("KVTIER_STRIP", "strip")
    if not strip:
        _say(stream, f"bundling libkvtier.so unstripped ({before / 1e6:.1f} MB; KVTIER_STRIP is empty)")
        return
    try:
        subprocess.run([strip, "--strip-unneeded", str(library)], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        _say(stream, f"could not strip the library ({e}); bundling it as built ({before / 1e6:.1f} MB)")
        return
    after = library.stat().st_size
    _say(stream, f"bundled libkvtier.so, stripped: {after / 1e6:.1f} MB (built: {before / 1e6:.1f} MB)")


class BinaryDistribution(Distribution):
    """The wheel carries a native library: platform-specific, not pure."""

    def has_ext_modules(self) -> bool:
        return True


commands: dict = {"build_py": BuildWithLibrary}
if bdist_wheel is not None:

    class PythonIndependentWheel(bdist_wheel):
        """``py3-none-<platform>``: the library is loaded by cffi at run
        time, the same for every Python 3."""

        def get_tag(self) -> tuple:
            _python, _abi, platform = super().get_tag()
            return "py3", "none", platform

    commands["bdist_wheel"] = PythonIndependentWheel


setup(
    version=_version(),
    cmdclass=commands,
    distclass=BinaryDistribution,
)
