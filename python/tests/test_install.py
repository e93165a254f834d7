"""`pip install ./python` in a fresh virtual environment, then a block
stored and loaded through a manager from the installed package, whose
bundled library is stripped."""

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import kvtier, os
assert kvtier.__file__.startswith(os.environ["VENV"]), kvtier.__file__
key = (7).to_bytes(8, "big") + bytes(4)
with kvtier.Manager(4, kv_groups=True) as m, m.request("req") as r:
    plan = m.prepare_store(r, [key])
    assert m.complete_store(r, [key]).ready == 1
    assert m.lookup(r, [key]).hits == 1
    assert m.prepare_load(r, [key]) == plan.slots
    m.complete_load(r, [key])
print("stored and loaded through", kvtier.__version__)
print("library:", kvtier._ffi.library_path)
"""


def test_pip_install_in_a_fresh_venv(tmp_path):
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(target)
    python = target / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVTIER_", "PYTHONPATH"))}
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(PACKAGE)],
        check=True,
        env=env,
        cwd=tmp_path,
    )
    env["VENV"] = str(target)
    result = subprocess.run(
        [str(python), "-c", SCRIPT], check=True, env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert "stored and loaded through" in result.stdout
    library = result.stdout.split("library: ", 1)[1].strip()
    assert library.startswith(str(target)), library
    if shutil.which("readelf"):
        sections = subprocess.run(["readelf", "-S", "-W", library], check=True, capture_output=True, text=True).stdout
        assert ".text" in sections and ".debug_info" not in sections and ".symtab" not in sections
    assert sys.prefix != str(target)
