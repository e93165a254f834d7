#!/usr/bin/env python3
"""make test-vllm: vLLM 0.33's own manager tests, run against kvtier.

    python3 tools/vllm_tests/run.py [--managers kvtier|vllm|both] [--build-dir build/vllm]

Two of vLLM 0.33.0's test files judge kvtier's managers:

* ``tests/v1/kv_offload/cpu/test_manager.py`` (``CPUOffloadingManager``);
* ``tests/v1/kv_offload/tiering/test_tiering_offloading.py``
  (``TieringOffloadingManager``, ``CPUPrimaryTierOffloadingManager`` and
  Python secondary tiers).

Beside them the run places two files of our own (``OWN_FILES``): cases
asked through the public manager interface only, judged on both sides the
same way, most of them restating vLLM's items that read private state
(``private_items.py`` says which).  A case whose answer from kvtier
differs from vLLM's is marked a strict expected failure on kvtier.

vLLM's files are fetched, never copied into this repository: the wheel
(``pip download --no-deps vllm==0.33.0``, its Python files read in place)
and the release source archive (for ``tests/``) are downloaded once into
the build directory.  Only the imports that pull in torch, CUDA or the rest
of vLLM are replaced (``vllm_stubs.py``); with ``--managers kvtier`` the
plugin ``kvtier_override.py`` swaps kvtier's classes into vLLM's modules;
with ``--managers vllm`` vLLM's own managers run, for comparison.

Items that read vLLM's private attributes, or patch private methods of
vLLM's composition, are listed in ``private_items.py`` with what they
read.  The run fails if a kvtier item outside that list fails (or a listed
one is missing from docs/vllm.md).  The counts of both runs are printed
side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from private_items import PRIVATE  # noqa: E402

VERSION = "0.33.0"
TEST_FILES = (
    "tests/v1/kv_offload/cpu/test_manager.py",
    "tests/v1/kv_offload/tiering/test_tiering_offloading.py",
)
# Our own cases (public interface only), copied beside vLLM's files before
# each run: this directory's file, its place among vLLM's tests.
OWN_FILES = {
    "test_public_interface.py": "tests/v1/kv_offload/tiering/test_public_interface.py",
    "test_cpu_public_interface.py": "tests/v1/kv_offload/cpu/test_public_interface.py",
}
ALL_FILES = TEST_FILES + tuple(OWN_FILES.values())


def _wheel(build: Path) -> Path:
    wheels = sorted(build.glob(f"vllm-{VERSION}-*.whl"))
    if not wheels:
        print(f"== downloading the vllm=={VERSION} wheel into {build} (pip)", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             "--dest", str(build), f"vllm=={VERSION}"],
            check=True,
        )
        wheels = sorted(build.glob(f"vllm-{VERSION}-*.whl"))
    return wheels[0]


def _sdist(build: Path) -> Path:
    archive = build / f"vllm-{VERSION}.tar.gz"
    if archive.is_file():
        return archive
    # pip cannot download this source archive without building its metadata
    # (which needs torch), so the file is fetched as pip finds it: from the
    # index's simple API (PEP 691, JSON form), checked against its sha256.
    print(f"== downloading the vllm=={VERSION} source archive into {build}", flush=True)
    index = os.environ.get("KVTIER_PYPI_SIMPLE", "https://pypi.org/simple")
    request = urllib.request.Request(
        f"{index}/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    [found] = [f for f in files if f["filename"] == archive.name]
    sdist = {"url": found["url"], "digests": {"sha256": found["hashes"]["sha256"]}}
    partial = archive.with_suffix(".part")
    with urllib.request.urlopen(sdist["url"], timeout=600) as response, open(partial, "wb") as out:
        while chunk := response.read(1 << 20):
            out.write(chunk)
    import hashlib

    digest = hashlib.sha256(partial.read_bytes()).hexdigest()
    if digest != sdist["digests"]["sha256"]:
        partial.unlink()
        sys.exit(f"test-vllm: {sdist['url']}: sha256 mismatch")
    partial.rename(archive)
    return archive


def prepare(build: Path) -> tuple[Path, Path]:
    """The unpacked vLLM package root and the tests root."""
    build.mkdir(parents=True, exist_ok=True)
    vllm_root = build / "wheel"
    if not (vllm_root / "vllm" / "v1" / "kv_offload" / "base.py").is_file():
        with zipfile.ZipFile(_wheel(build)) as wheel:
            members = [n for n in wheel.namelist() if n.startswith("vllm/") and n.endswith(".py")]
            wheel.extractall(vllm_root, members)
    tests_root = build / "src"
    marker = tests_root / ".complete"
    if not marker.is_file():
        prefix = f"vllm-{VERSION}/"
        wanted = ("tests/__init__.py", "tests/v1/__init__.py", "tests/v1/kv_offload/")
        with tarfile.open(_sdist(build)) as tar:
            members = []
            for member in tar.getmembers():
                name = member.name[len(prefix):] if member.name.startswith(prefix) else ""
                if name and any(name == w or name.startswith(w) for w in wanted) and member.isfile():
                    member.name = name
                    members.append(member)
            tar.extractall(tests_root, members)
        marker.write_text(VERSION + "\n")
    for source, place in OWN_FILES.items():
        (tests_root / place).write_bytes((HERE / source).read_bytes())
    return vllm_root, tests_root


def run_pytest(vllm_root: Path, tests_root: Path, managers: str, report: Path) -> dict[str, str]:
    """Runs the two files; outcome by test id."""
    env = dict(os.environ)
    env["VLLM_ROOT"] = str(vllm_root)
    paths = [str(HERE), str(REPO / "python")]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    ini = report.with_suffix(".ini")
    ini.write_text("[pytest]\n")
    command = [
        sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(tests_root),
        "--confcutdir", str(tests_root / "tests" / "v1" / "kv_offload"),
        "-p", "vllm_stubs", "-p", "no:cacheprovider", "-q", "--tb=line", "-o", "faulthandler_timeout=120",
        f"--junitxml={report}",
    ]
    if managers == "kvtier":
        command += ["-p", "kvtier_override"]
    command += ALL_FILES
    print(f"== vLLM {VERSION}'s manager tests against {managers}'s managers", flush=True)
    subprocess.run(command, cwd=tests_root, env=env)
    return outcomes_of(report)


def outcomes_of(report: Path) -> dict[str, str]:
    """A JUnit report's outcome of each item, by pytest id."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        cls = parts.pop() if parts and parts[-1].startswith("Test") else None
        name = "/".join(parts) + ".py::" + (f"{cls}::" if cls else "") + case.get("name", "")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        outcomes[name] = outcome
    return outcomes


def counts(outcomes: dict[str, str], file: str) -> tuple[int, int, int]:
    of_file = [o for n, o in outcomes.items() if n.startswith(file)]
    return of_file.count("passed"), of_file.count("failed"), len(of_file)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--managers", choices=("kvtier", "vllm", "both"), default="both")
    parser.add_argument("--build-dir", default=str(REPO / "build" / "vllm"))
    args = parser.parse_args()
    build = Path(args.build_dir).resolve()
    vllm_root, tests_root = prepare(build)
    results = {}
    for managers in (("vllm", "kvtier") if args.managers == "both" else (args.managers,)):
        results[managers] = run_pytest(vllm_root, tests_root, managers, build / f"report-{managers}.xml")

    print()
    print(f"{'file':58} " + " ".join(f"{m + ' passed':>16}" for m in results))
    for file in ALL_FILES:
        cells = []
        for outcomes in results.values():
            passed, _failed, total = counts(outcomes, file)
            cells.append(f"{passed:>9} / {total:<4}")
        print(f"{file:58} " + " ".join(f"{c:>16}" for c in cells))
    status = 0
    if "kvtier" in results:
        outcomes = results["kvtier"]
        unexpected = sorted(n for n, o in outcomes.items() if o == "failed" and n not in PRIVATE)
        private_failed = sorted(n for n, o in outcomes.items() if o == "failed" and n in PRIVATE)
        public = [n for n in outcomes if n not in PRIVATE]
        public_passed = sum(outcomes[n] == "passed" for n in public)
        differences = sum(outcomes[n] == "xfailed" for n in public)
        print(f"kvtier: {public_passed} of {len(public)} items using the public manager interface pass "
              f"({differences} marked as known differences); "
              f"{len(PRIVATE)} items read vLLM's private attributes ({len(private_failed)} of them fail)")
        docs = (REPO / "docs" / "vllm.md").read_text() if (REPO / "docs" / "vllm.md").is_file() else ""
        undocumented = [n for n in PRIVATE if n.split("::", 1)[1] not in docs]
        if undocumented:
            print("test-vllm: items of private_items.py missing from docs/vllm.md:", *undocumented, sep="\n  ")
            status = 1
        if unexpected:
            print("test-vllm: kvtier FAILED items that use only the public interface:", *unexpected, sep="\n  ")
            status = 1
        unknown = sorted(n for n in PRIVATE if n not in outcomes)
        if unknown:
            print("test-vllm: private_items.py names items vLLM's files do not have:", *unknown, sep="\n  ")
            status = 1
    if "vllm" in results and any(o == "failed" for o in results["vllm"].values()):
        print("test-vllm: vLLM's own managers fail their own tests here: the stand-ins are wrong")
        status = 1
    passed = sum(o == "passed" for r in results.values() for o in r.values())
    failed = sum(o == "failed" for r in results.values() for o in r.values())
    expected_failures = sum(o == "failed" and n in PRIVATE for n, o in results.get("kvtier", {}).items())
    if expected_failures:
        print(f"test-vllm: {expected_failures} kvtier items that read vLLM's private attributes fail "
              "(listed in docs/vllm.md); not counted below")
    print(f"test-vllm: {passed} passed, {failed - expected_failures} failed")
    return status


if __name__ == "__main__":
    sys.exit(main())
