"""Settings from the environment, shared by the benchmarks and the summary (which must not import mlx).

DECIDE_BENCH_MODEL   the model to benchmark (default smollm2-135m)
DECIDE_BENCH_ROUNDS  timed rounds per path at most (default 3)
DECIDE_BENCH_BUDGET_S  timed seconds per path, fewer rounds when a run is slow (default 30)
DECIDE_BENCH_FULL=1  run the oracles on whole requests instead of samples (slow: tens of minutes)
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def model() -> str:
    return os.environ.get("DECIDE_BENCH_MODEL", "smollm2-135m")


def rounds() -> int:
    return int(os.environ.get("DECIDE_BENCH_ROUNDS", "3"))


def budget_seconds() -> float:
    return float(os.environ.get("DECIDE_BENCH_BUDGET_S", "30"))


def full_oracles() -> bool:
    return os.environ.get("DECIDE_BENCH_FULL") == "1"


def default_json(model_name: str | None = None) -> Path:
    return ROOT / ".benchmarks" / f"decide-{(model_name or model()).replace('/', '_')}.json"
