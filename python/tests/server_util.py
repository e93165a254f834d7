"""A real ``kvtierd`` for the tests that connect to one: the binary built
beside the library (``target/release/kvtierd`` in a source checkout, or
``KVTIER_SERVER_BINARY``), started on a new socket in a new directory."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from kvtier._ffi import library_path

from conftest import skip_or_fail

BLOCK_BYTES = 4096
SLOTS = 16


def server_binary() -> Path:
    """The kvtierd to run; skips (fails under KVTIER_REQUIRE_ALL=1) without one."""
    explicit = os.environ.get("KVTIER_SERVER_BINARY")
    binary = Path(explicit) if explicit else Path(library_path).parent / "kvtierd"
    if not binary.is_file():
        skip_or_fail(f"no kvtierd at {binary} (`make lib` builds it)")
    return binary


class Server:
    """A kvtierd process: its socket `path`, region `name` in `directory`."""

    def __init__(self, name: str, *, fingerprint: str = "", slots: int = SLOTS, block_bytes: int = BLOCK_BYTES):
        binary = server_binary()
        # Short: a Unix socket's path has room for about 100 bytes.
        self.directory = Path(tempfile.mkdtemp(prefix="kvtierd-"))
        self.path = self.directory / "s.sock"
        self.name = name
        config = {
            "block_bytes": block_bytes,
            "region": {"name": name, "directory": str(self.directory)},
            "primary": {"capacity": slots},
            "server": {"fingerprint": fingerprint},
        }
        config_file = self.directory / "kvtierd.json"
        config_file.write_text(json.dumps(config))
        self.log = open(self.directory / "kvtierd.log", "w+")
        self.proc = subprocess.Popen(
            [str(binary), "--config", str(config_file), "--socket", str(self.path)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvtierd exited with {self.proc.returncode}: {self.output()}")
            if self.path.exists():
                probe = socket.socket(socket.AF_UNIX)
                try:
                    probe.connect(str(self.path))
                    return
                except OSError:
                    pass
                finally:
                    probe.close()
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"kvtierd did not listen on {self.path} within 60 s: {self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def kill(self) -> None:
        """Kills the server at once (SIGKILL), and reaps it."""
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)
