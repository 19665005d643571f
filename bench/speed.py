"""float32 vs bfloat16 vs int8 in one process, interleaved:
`python -m bench.speed [cases...] [--rounds N] [--model M]`.

Three deciders on one model, each the trie engine: float32, `bf16` (decide.bf16) and `int8` (decide.int8:
the bf16 backend with W8A8 linear layers). Each round runs every case on each of them in turn, prefix cache cleared first (cold), so a busy
machine slows them alike; the medians and their ratios are printed, of wall time and of the
process's CPU time (all its threads: steadier than wall time when other processes take the cores).
Default cases: standard, choice40.
"""

from __future__ import annotations

import argparse
import statistics
import time

import decide.runtime  # noqa: F401  (BLAS before mlx)
from decide.core import Decider
from decide.models import load_model

from . import config
from .cases import CASES
from .harness import ENGINE_ONLY, as_served


def deciders(model: str, float32: bool = True) -> dict[str, Decider]:
    precisions = {"float32": "float32", "bf16": "bfloat16", "int8": "int8"}
    if not float32:
        del precisions["float32"]
    return {name: Decider(load_model(model, precision=p), ENGINE_ONLY(scorer="trie")) for name, p in precisions.items()}


def seconds(decider: Decider, request) -> tuple[float, float]:
    """(wall, CPU) seconds of one cold request."""
    decider.trie.cache.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    decider.decide(request)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="case", help=f"of {', '.join(CASES)} (default: standard choice40)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default=config.model())
    parser.add_argument("--no-float32", action="store_true", help="bf16 vs int8 only (a 1.5B model: half the RAM)")
    args = parser.parse_args()
    as_served()
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: use {', '.join(CASES)}")
    args.cases = args.cases or ["standard", "choice40"]
    runs = deciders(args.model, float32=not args.no_float32)
    base = next(iter(runs))
    requests = {case: CASES[case].build() for case in args.cases}
    times = {(case, name): [] for case in args.cases for name in runs}
    for request in requests.values():  # warm-up: primitives, tables, allocations
        for decider in runs.values():
            decider.decide(request)
    for _ in range(args.rounds):
        for case, request in requests.items():
            for name, decider in runs.items():
                times[case, name].append(seconds(decider, request))
    print(f"{args.model}, cold prefix cache, median of {args.rounds} interleaved rounds")
    for case in args.cases:
        for i, clock in enumerate(("wall", "CPU")):
            median = {name: statistics.median(t[i] for t in times[case, name]) for name in runs}
            cells = [f"{name} {s:.3f} s" for name, s in median.items()]
            ratios = [f"{median[base] / s:.2f}x" for name, s in median.items() if name != base]
            print(f"  {case:<10} {clock:<4} " + "   ".join(cells) + f"   speed-up over {base}: " + " / ".join(ratios))


if __name__ == "__main__":
    main()
