"""Benchmark fixtures: the model (DECIDE_BENCH_MODEL, default smollm2-135m) and the harness.

decide.runtime is imported first so that the optimized BLAS is loaded before anything imports mlx.
The pytest-benchmark JSON goes to .benchmarks/decide-<model>.json unless --benchmark-json is given;
`python -m bench.summary` reads it.
"""

from __future__ import annotations

import pytest

import decide.runtime  # noqa: F401  (the BLAS swap must precede any mlx import)

from . import config as settings
from .harness import Harness, as_served


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    as_served()
    if config.getoption("benchmark_json", None) is None:
        path = settings.default_json()
        path.parent.mkdir(exist_ok=True)
        config.option.benchmark_json = path


@pytest.fixture(scope="session")
def loaded():
    from decide.models import load_model

    return load_model(settings.model(), precision="float32")


@pytest.fixture(scope="session")
def loaded_bf16():
    """The same model in bfloat16 where the oneDNN backend is built (any CPU: measured even without native bf16)."""
    from decide import bf16
    from decide.models import load_model

    return load_model(settings.model(), precision="bfloat16") if bf16.available() else None


@pytest.fixture(scope="session")
def harness(loaded, loaded_bf16) -> Harness:
    return Harness(loaded, full_oracles=settings.full_oracles(), loaded_bf16=loaded_bf16)
