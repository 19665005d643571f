"""Run `gunicorn` on 127.0.0.1 with a free port for real-client tests; stop it by its PID.

with ServerProcess.start("wsgi:app", env={"DECIDE_MODEL": path}) as server:
    requests.get(server.url + "/health")
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def tiny_model_env(root: Path, **extra: str) -> dict[str, str]:
    """Environment for `wsgi:app` on the tiny test model, converted into `root`'s own cache."""
    from tiny_model import write_tiny_gguf

    model = root / "tiny.gguf"
    if not model.exists():
        write_tiny_gguf(model)
    return {"DECIDE_MODEL": str(model), "DECIDE_CACHE_DIR": str(root / "cache"), "DECIDE_API_KEY": "", **extra}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        """The origin (the TypeSafe SDK's base URL); the OpenAI SDK wants url + "/v1"."""
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, app: str = "wsgi:app", env: dict[str, str] | None = None, timeout: float = 300.0) -> ServerProcess:
        """Start gunicorn with gunicorn.conf.py and wait until GET /health answers 200."""
        cmd = [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"), "--pythonpath", str(TESTS), app]
        return cls.run(lambda port: cmd, env, timeout)

    @classmethod
    def run(
        cls, command: Callable[[int], list[str]], env: dict[str, str] | None = None, timeout: float = 300.0, cwd=ROOT
    ) -> ServerProcess:
        """Start `command(port)` (a server on DECIDE_BIND = 127.0.0.1:port) and wait until it is ready."""
        port = free_port()
        log = Path(tempfile.mkstemp(prefix="decide-gunicorn-", suffix=".log")[1])
        full_env = {**os.environ, "DECIDE_BIND": f"127.0.0.1:{port}", **(env or {})}
        with open(log, "wb") as out:
            proc = subprocess.Popen(command(port), cwd=cwd, env=full_env, stdout=out, stderr=subprocess.STDOUT)
        server = cls(proc, port, log)
        try:
            server.wait_ready(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_ready(self, timeout: float) -> dict:
        """Wait until /health says "ok" (the model is loaded); return that body."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.log_tail()}")
            health = self.health()
            if health is not None and health.get("status") == "ok":
                return health
            time.sleep(0.2)
        raise TimeoutError(f"gunicorn did not become ready within {timeout} s:\n{self.log_tail()}")

    def health(self) -> dict | None:
        """The /health body (whatever its status), or None while nothing answers."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def metrics(self) -> dict[str, float]:
        """/metrics as {"name{labels}": value} (samples only, comments dropped)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        """SIGTERM the gunicorn master (it stops its worker), SIGKILL if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
