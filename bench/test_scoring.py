"""The scoring paths on the four requests of the issue (bench/cases.py), each checked against the oracles.

A path's first run is checked (answers equal the reference within PROB_TOL), then timed; a heavy
case's single timed run is itself the checked one. A failed check fails the benchmark, and the
summary shows only checked rows.
"""

from __future__ import annotations

import time

import pytest

from . import config
from .cases import CASES

ROUNDS = config.rounds()
BUDGET_S = config.budget_seconds()  # timed seconds per path, at most ROUNDS rounds

PATHS = {name: ("reference", "prompt_once", "trie", "trie_bf16") for name in CASES}
PATHS["state20"] = ("reference", "prompt_once", "trie", "trie_warm", "trie_bf16")
RUNS = [(name, path) for name, paths in PATHS.items() for path in paths]


@pytest.mark.parametrize(("case_name", "path"), RUNS, ids=[f"{c}-{p}" for c, p in RUNS])
def test_scoring(benchmark, harness, case_name: str, path: str) -> None:
    case = CASES[case_name]
    if not harness.runs(path):
        pytest.skip(f"{path} does not run here (the trie does not fit the model, or no bf16 backend)")
    benchmark.group = case_name
    run, setup = harness.runner(case, path), harness.setup(path)
    if path == "reference":
        outcome = benchmark.pedantic(run, rounds=1 if harness.sampled(case, path) else ROUNDS)
        harness.oracles[(case_name, path)] = outcome
        errors = (0.0, 0.0)
    elif case.heavy and path != "trie_warm":
        outcome = benchmark.pedantic(run, setup=setup, rounds=1)
        errors = harness.check(case, path, outcome)
    else:
        rounds = _rounds(_timed_check(harness, case, path, run, setup))
        outcome = benchmark.pedantic(run, setup=setup, rounds=rounds)
        errors = harness.check(case, path, outcome)
    if path == "prompt_once":
        harness.oracles[(case_name, path)] = outcome
    benchmark.extra_info.update(harness.info(case, path, outcome, errors))


def _timed_check(harness, case, path, run, setup) -> float:
    """Run once untimed by the benchmark (a warm-up), check the answers, return its wall time."""
    if setup is not None:
        setup()
    start = time.perf_counter()
    outcome = run()
    elapsed = time.perf_counter() - start
    harness.check(case, path, outcome)
    return elapsed


def _rounds(seconds: float) -> int:
    return max(1, min(ROUNDS, int(BUDGET_S // max(seconds, 1e-9))))
