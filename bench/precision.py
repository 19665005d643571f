"""Reduced precisions against float32 on labelled questions:
`python -m bench.precision [--model M] [--limit N] [--precisions float32,bfloat16]`.

Two dev sets of ../shared/data (never their test splits): SST-2's dev split as yes/no questions,
and the last 500 examples of TREC's train split (a dev split carved out of it) as a choice among
its six answer types. Each example is one request, answered by the trie engine at each precision,
loaded side by side; the first precision (float32: exact to the reference scorer,
tests/models/test_smollm_scoring.py) is the baseline. Prints, for each other precision, max / mean
|Δp| over every answer's probabilities and the share of questions whose best answer changes, and
the accuracy and time of each.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import decide.runtime  # noqa: F401  (BLAS before mlx)
from decide.core import Decider, DeciderOptions
from decide.request import DecisionRequest, Option, Question


def data_dir() -> Path:
    """$DECIDE_DATA_DIR, else the nearest shared/data above this checkout (../shared/data of the project's)."""
    if os.environ.get("DECIDE_DATA_DIR"):
        return Path(os.environ["DECIDE_DATA_DIR"])
    here = Path(__file__).resolve()
    return next((p / "shared" / "data" for p in here.parents if (p / "shared" / "data").is_dir()), here.parent)


DATA = data_dir()
TREC_TYPES = [
    Option("description", "a definition, a description or a reason"),
    Option("entity", "a thing: an object, animal, color, food, product, term…"),
    Option("abbreviation", "what an abbreviation stands for, or the abbreviation of something"),
    Option("human", "a person or a group of people"),
    Option("location", "a place: a city, country, mountain, address…"),
    Option("number", "a number: a count, date, amount, distance, percentage…"),
]


def examples(path: Path, limit: int | None, tail: bool = False) -> list[tuple[int, str]]:
    rows = [line.split(" ", 1) for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line]
    rows = rows[-limit:] if tail and limit else rows[:limit]
    return [(int(label), text.strip()) for label, text in rows]


def sst2(limit: int | None) -> Iterator[tuple[DecisionRequest, int]]:
    question = Question.predicate("Does this movie review express a positive opinion of the film?")
    for label, text in examples(DATA / "stsa.binary.dev", limit):
        yield DecisionRequest.of(text, [question]), label  # options [False, True]: index = label


def trec(limit: int | None) -> Iterator[tuple[DecisionRequest, int]]:
    question = Question.choice("What kind of answer does this question ask for?", TREC_TYPES)
    for label, text in examples(DATA / "TREC.train.all", limit or 500, tail=True):
        yield DecisionRequest.of(text, [question]), label


def answer_all(decider: Decider, requests: list[DecisionRequest], batch: int = 16) -> list[np.ndarray]:
    probs = []
    for start in range(0, len(requests), batch):
        decider.trie.cache.clear()
        for decision in decider.decide_batch(requests[start : start + batch]):
            probs.append(np.asarray(decision.answers[0].probabilities))
    return probs


def report(name: str, labels: list[int], runs: dict[str, list[np.ndarray]], seconds: dict[str, float]) -> None:
    base = next(iter(runs))
    print(f"{name}: {len(labels)} questions", flush=True)
    for precision, probs in runs.items():
        accuracy = np.mean([np.argmax(x) == y for x, y in zip(probs, labels)])
        line = f"  {precision:<9} accuracy {accuracy:.2%}  time {seconds[precision]:.1f} s"
        if precision != base:
            deltas = np.concatenate([np.abs(a - b) for a, b in zip(runs[base], probs)])
            flips = sum(int(np.argmax(a) != np.argmax(b)) for a, b in zip(runs[base], probs))
            line += (
                f"  vs {base}: |Δp| max {deltas.max():.4f} mean {deltas.mean():.5f}; "
                f"best answer changed {flips} ({flips / len(labels):.2%})"
            )
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--limit", type=int, default=None, help="examples per set (default: all of SST-2, 500 of TREC)")
    parser.add_argument("--precisions", default="float32,bfloat16", help="the first is the baseline")
    args = parser.parse_args()
    deciders = {p: Decider.load(args.model, DeciderOptions(precision=p)) for p in args.precisions.split(",")}
    for name, source in (("SST-2 dev (yes/no)", sst2), ("TREC dev (choice of 6)", trec)):
        pairs = list(source(args.limit))
        requests, labels = [r for r, _ in pairs], [y for _, y in pairs]
        runs, seconds = {}, {}
        for precision, decider in deciders.items():
            start = time.perf_counter()
            runs[precision] = answer_all(decider, requests)
            seconds[precision] = time.perf_counter() - start
        report(name, labels, runs, seconds)


if __name__ == "__main__":
    main()
