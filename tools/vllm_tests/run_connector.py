#!/usr/bin/env python3
"""make test-vllm-connector: vLLM 0.33's offloading-connector unit tests,
with vLLM's specs and with kvtier's.

    python3 tools/vllm_tests/run_connector.py [--side kvtier|vllm|both]
        [--build-dir build/vllm] [--venv build/vllm-torch-venv]

``tests/v1/kv_connector/unit/offloading_connector/`` of vLLM 0.33.0's
source archive runs twice on this CPU-only machine, in a virtual
environment of its own with the real torch and vLLM (no stand-ins):

* ``vllm``: vLLM's tests as they are;
* ``kvtier``: with ``connector_spec.py`` loading kvtier's spec by name
  (``spec_name``/``spec_module_path``) wherever a test names vLLM's
  ``CPUOffloadingSpec`` or ``TieringOffloadingSpec``, and kvtier's manager
  where a test builds vLLM's ``CPUOffloadingManager``.

The environment (``--venv``) is made once: torch 2.14.0 and vLLM 0.33.0
installed without their dependencies, then ``connector-requirements.txt``
(torch's CUDA libraries, which ``import torch`` loads even without a GPU,
and what vLLM's config, scheduler and connector modules import).  The
tests ask for ``facebook/opt-125m``'s configuration, answered offline from
a model cache in the build directory holding only its ``config.json``
(``opt-125m-config.json``); vLLM runs on its CPU platform
(``VLLM_TARGET_DEVICE=cpu``).

Then ``python/tests/test_vllm_worker.py`` runs in the same environment:
kvtier's spec building vLLM's CPU worker over kvtier's region (it skips
where torch is missing, so here a skip fails the run).

The run fails if an item fails on vLLM's side (the environment is then
wrong), or on kvtier's side only and is not in ``KNOWN_DIFFERENCES``, or if
an item used one of vLLM's real specs or managers on kvtier's side.  It
prints both sides' counts, and how many items used a real spec or manager
(the others run the connector over the tests' own mock spec, the same
code on both sides).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from run import VERSION, _sdist, _wheel, outcomes_of  # noqa: E402

TORCH = "torch==2.14.0"
REQUIREMENTS = HERE / "connector-requirements.txt"
TESTS = "tests/v1/kv_connector/unit/offloading_connector"
# Files of the source archive the tests import, beside TESTS.
TEST_FILES = (
    "tests/__init__.py",
    "tests/v1/__init__.py",
    "tests/v1/kv_connector/__init__.py",
    "tests/v1/kv_connector/unit/__init__.py",
    "tests/v1/kv_connector/unit/conftest.py",
    "tests/v1/kv_connector/unit/utils.py",
)
MODEL = "facebook/opt-125m"
# Items that fail with kvtier's spec and not with vLLM's, each with the
# reason (docs/vllm.md lists them): none.
KNOWN_DIFFERENCES: dict[str, str] = {}
VLLM_CLASSES = {"CPUOffloadingSpec", "TieringOffloadingSpec", "CPUOffloadingManager", "TieringOffloadingManager"}
KVTIER_CLASSES = {"KvtierOffloadingSpec", "KvtierOffloadingManager"}


def _stamp() -> str:
    return hashlib.sha256(f"{TORCH} vllm=={VERSION}\n".encode() + REQUIREMENTS.read_bytes()).hexdigest()


def venv(path: Path, build: Path) -> Path:
    """The environment's Python, made (and timed) if it is not there."""
    python = path / "bin" / "python"
    marker = path / ".kvtier-connector"
    if python.is_file() and marker.is_file() and marker.read_text().strip() == _stamp():
        return python
    print(f"== making {path}: {TORCH} and vllm=={VERSION} without their dependencies, "
          f"then {REQUIREMENTS.name}", flush=True)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(pip + ["--no-deps", TORCH, str(_wheel(build))], check=True)
    # pip warns that torch's and vLLM's other requirements are missing: they
    # are left out on purpose.
    result = subprocess.run(pip + ["-r", str(REQUIREMENTS)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"test-vllm-connector: installing {REQUIREMENTS.name} failed:\n{result.stdout}{result.stderr}")
    marker.write_text(_stamp() + "\n")
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"== {path}: {time.monotonic() - start:.0f} s, {size / 2**30:.1f} GiB", flush=True)
    return python


def tests_tree(build: Path) -> Path:
    root = build / "connector-src"
    marker = root / ".complete"
    if not marker.is_file():
        prefix = f"vllm-{VERSION}/"
        with tarfile.open(_sdist(build)) as tar:
            members = []
            for member in tar.getmembers():
                name = member.name[len(prefix):] if member.name.startswith(prefix) else ""
                if member.isfile() and (name in TEST_FILES or name.startswith(TESTS + "/")):
                    member.name = name
                    members.append(member)
            tar.extractall(root, members)
        marker.write_text(VERSION + "\n")
    return root


def model_cache(build: Path) -> Path:
    """A Hugging Face cache that answers MODEL's configuration offline."""
    home = build / "hf"
    revision = "0" * 40
    repo = home / "hub" / ("models--" + MODEL.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_bytes((HERE / "opt-125m-config.json").read_bytes())
    return home


def run_side(python: Path, root: Path, hf_home: Path, side: str, build: Path) -> tuple[dict[str, str], dict]:
    report = build / f"connector-report-{side}.xml"
    used = build / f"connector-used-{side}.json"
    env = dict(os.environ)
    paths = [str(HERE), str(REPO / "python")]
    env.update(
        PYTHONPATH=os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        VLLM_TARGET_DEVICE="cpu",
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        KVTIER_CONNECTOR_SIDE=side,
        KVTIER_CONNECTOR_USED=str(used),
    )
    ini = build / "connector.ini"
    ini.write_text("[pytest]\nmarkers =\n    cpu_test\n    skip_global_cleanup\n")
    command = [
        str(python), "-m", "pytest", "-c", str(ini), "--rootdir", str(root),
        "--confcutdir", str(root / "tests" / "v1" / "kv_connector" / "unit"),
        "-p", "connector_spec", "-p", "no:cacheprovider", "-q", "--tb=short", "-rfE",
        "-o", "faulthandler_timeout=300", f"--junitxml={report}", TESTS,
    ]
    print(f"== vLLM {VERSION}'s offloading-connector tests with {side}'s spec", flush=True)
    start = time.monotonic()
    subprocess.run(command, cwd=root, env=env)
    print(f"== {side}: {time.monotonic() - start:.0f} s", flush=True)
    return outcomes_of(report), json.loads(used.read_text())["items"] if used.is_file() else {}


def run_worker_tests(python: Path, build: Path) -> dict[str, str]:
    """python/tests/test_vllm_worker.py in the environment; outcome by test id."""
    report = build / "connector-report-worker.xml"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["VLLM_TARGET_DEVICE"] = "cpu"
    print("== kvtier's spec through vLLM's CPU worker (python/tests/test_vllm_worker.py)", flush=True)
    subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "--tb=short",
                    f"--junitxml={report}", str(REPO / "python" / "tests" / "test_vllm_worker.py")],
                   cwd=REPO, env=env)
    return outcomes_of(report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", choices=("kvtier", "vllm", "both"), default="both")
    parser.add_argument("--build-dir", default=str(REPO / "build" / "vllm"))
    parser.add_argument("--venv", default=str(REPO / "build" / "vllm-torch-venv"))
    parser.add_argument("--prepare-only", action="store_true", help="make the environment and the test tree only")
    args = parser.parse_args()
    build = Path(args.build_dir).resolve()
    build.mkdir(parents=True, exist_ok=True)
    python = venv(Path(args.venv).resolve(), build)
    root = tests_tree(build)
    hf_home = model_cache(build)
    if args.prepare_only:
        return 0
    results, used = {}, {}
    for side in (("vllm", "kvtier") if args.side == "both" else (args.side,)):
        results[side], used[side] = run_side(python, root, hf_home, side, build)

    kinds = ("passed", "failed", "skipped", "xfailed")
    print()
    print(f"{'side':8} " + " ".join(f"{k:>8}" for k in kinds) + f" {'items':>6} {'used a real spec or manager':>30}")
    for side, outcomes in results.items():
        counts = [sum(o == k for o in outcomes.values()) for k in kinds]
        print(f"{side:8} " + " ".join(f"{c:>8}" for c in counts) + f" {len(outcomes):>6} {len(used[side]):>30}")
    status = 0
    if "vllm" in results:
        failed = sorted(n for n, o in results["vllm"].items() if o == "failed")
        if failed:
            print("test-vllm-connector: items fail with vLLM's own spec (the environment is wrong):",
                  *failed, sep="\n  ")
            status = 1
    if "kvtier" in results:
        kvtier = results["kvtier"]
        vllm = results.get("vllm", {})
        differences = sorted(n for n, o in kvtier.items() if o == "failed" and vllm.get(n) != "failed")
        unexplained = [n for n in differences if n not in KNOWN_DIFFERENCES]
        if unexplained:
            print("test-vllm-connector: items fail with kvtier's spec only:", *unexplained, sep="\n  ")
            status = 1
        for name in differences:
            if name in KNOWN_DIFFERENCES:
                print(f"  known difference: {name}: {KNOWN_DIFFERENCES[name]}")
        leaked = sorted(n for n, built in used["kvtier"].items() if VLLM_CLASSES & set(built))
        if leaked:
            print("test-vllm-connector: items used vLLM's real specs or managers on kvtier's side:",
                  *leaked, sep="\n  ")
            status = 1
        if "vllm" in used:
            on_vllm = {n for n, built in used["vllm"].items() if VLLM_CLASSES & set(built)}
            on_kvtier = {n for n, built in used["kvtier"].items() if KVTIER_CLASSES & set(built)}
            if on_vllm != on_kvtier:
                print("test-vllm-connector: the items that used a spec or manager differ between the sides:",
                      *sorted(on_vllm ^ on_kvtier), sep="\n  ")
                status = 1
            print(f"{len(on_kvtier)} items used kvtier's spec or manager where vLLM's side used vLLM's")
    worker = run_worker_tests(python, build)
    print(f"worker tests: {sum(o == 'passed' for o in worker.values())} of {len(worker)} passed")
    if not worker or any(o != "passed" for o in worker.values()):
        print("test-vllm-connector: the worker tests did not all pass (a skip counts: torch and vLLM are here)")
        status = 1
    results["worker"] = worker
    passed = sum(o == "passed" for r in results.values() for o in r.values())
    failed = sum(o == "failed" for r in results.values() for o in r.values())
    skipped = sum(o in ("skipped", "xfailed") for r in results.values() for o in r.values())
    print(f"test-vllm-connector: {passed} passed, {failed} failed, {skipped} skipped")
    return status


if __name__ == "__main__":
    sys.exit(main())
