"""Shared fixtures: the tiny GGUF model and the embedded models; the folders' contracts.

tests/unit needs no model and no server (`make test-fast`), tests/models loads models in process,
tests/server starts servers or other subprocesses. Each test gets its folder's name as a marker,
and a unit test that reaches for a model or a server fails, saying where it belongs.

decide.runtime is imported first so that the optimized BLAS is loaded before anything
imports mlx.core. Tests convert models into a temporary cache (DECIDE_CACHE_DIR) except the
real embedded models, whose conversion stays in the normal cache so repeated runs are fast.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from server_process import ServerProcess
from tiny_model import write_tiny_gguf

import decide.runtime  # noqa: F401  (the BLAS swap must precede any mlx import)
from decide.models import LoadedModel, default_cache_dir, load_model, loader

FOLDERS = ("unit", "models", "server")
MODEL_FIXTURES = frozenset({"tiny_gguf_path", "tiny_qwen2_gguf_path", "tiny_model", "smollm", "qwen"})

# Captured before the session fixture below points DECIDE_CACHE_DIR at a temporary folder.
REAL_MODEL_CACHE = default_cache_dir()


@pytest.fixture(scope="session", autouse=True)
def _temporary_model_cache(tmp_path_factory: pytest.TempPathFactory):
    patch = pytest.MonkeyPatch()
    patch.setenv("DECIDE_CACHE_DIR", str(tmp_path_factory.mktemp("decide-cache")))
    # The suite's exactness bounds are float32's; bfloat16 tests ask for it (tests/*/test_bf16*.py).
    patch.setenv("DECIDE_PRECISION", "float32")
    # Engine tests compare raw scoring with the reference; calibration tests choose their method explicitly.
    patch.setenv("DECIDE_CALIBRATION", "none")
    yield
    patch.undo()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(item.path).parent.name
        if folder in FOLDERS:
            item.add_marker(folder)


@pytest.fixture(autouse=True)
def _unit_tests_stay_unit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("unit") is None:
        return
    wanted = MODEL_FIXTURES & set(request.fixturenames)
    if wanted:
        pytest.fail(f"a unit test uses {sorted(wanted)}: it belongs in tests/models")

    def refuse(what: str, folder: str):
        def refused(*args, **kwargs):
            raise AssertionError(f"a unit test {what}: it belongs in tests/{folder}")

        return refused

    monkeypatch.setattr(loader, "build_model", refuse("builds a model", "models"))
    monkeypatch.setattr(ServerProcess, "start", refuse("starts a server", "server"))


@pytest.fixture(scope="session")
def tiny_gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama-arch chat model (ChatML, byte-level BPE) as a GGUF file."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf", arch="llama")


@pytest.fixture(scope="session")
def tiny_qwen2_gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same shape as qwen2 arch: q/k/v biases, untied output, unpermuted Q/K."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny-qwen2") / "tiny-qwen2.gguf", arch="qwen2", seed=1)


@pytest.fixture(scope="session")
def tiny_qwen2_model(tiny_qwen2_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    """The qwen2-arch tiny model, loaded (its greedy text is not one token repeated, as the llama one's is)."""
    return load_model(str(tiny_qwen2_gguf_path), cache_dir=tmp_path_factory.mktemp("tiny-qwen2-cache"), progress=False)


@pytest.fixture(scope="session")
def tiny_model(tiny_gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return load_model(str(tiny_gguf_path), cache_dir=tmp_path_factory.mktemp("tiny-cache"), progress=False)


@pytest.fixture(scope="session")
def smollm() -> LoadedModel:
    """The embedded SmolLM2-135M-Instruct (tests marked @pytest.mark.smollm)."""
    return load_model("smollm2-135m", cache_dir=REAL_MODEL_CACHE, progress=False)


@pytest.fixture(scope="session")
def qwen() -> LoadedModel:
    """The embedded default, Qwen2.5-Coder-1.5B-Instruct (tests marked @pytest.mark.slow)."""
    return load_model("qwen2.5-coder-1.5b", cache_dir=REAL_MODEL_CACHE)
