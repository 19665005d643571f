"""Fitted readouts, layer by layer: which layer's hidden state answers best, and what `decide fit` picks.

Scores the training and the dev examples once through the engine (kept in build/scores, keyed by
file, count, model, kernel backend and precision, so a rerun only refits), fits on the training examples and
prints, on the dev examples: the model as is (`none`), the fitted bias alone, a readout restricted to
each readout layer the engine keeps (its L2 chosen by cross-validation, as `decide fit` does), the
readout of the one layer cross-validation picks (what `decide fit` did before it read several), of the
layers it picks, and `decide fit`'s own choice (layers, L2, and readout or bias, all by cross-validation). The row
"layer N (last)" is what `decide fit` did before it had the middle layers. Then `decide fit`'s dev
accuracy when it has only the first --sizes training labels. Also the scoring and fitting times.
Everything here is on the plain prompts: `decide fit` now first shows a few labels as demonstrations in
the prompt, and `decide fit TRAIN --dev DEV` measures that.

    python -m bench.readout_layers build/eval/trec-w0-train.jsonl build/eval/trec-w0-dev.jsonl
"""

from __future__ import annotations

import argparse
import pickle
import time
from pathlib import Path

import numpy as np

from decide.answers import softmax
from decide.core import Decider
from decide.quality.data import load
from decide.quality.evaluate import Scored, score
from decide.quality.fit import fit_question, fit_readout, layer_states
from decide.quality.fitting import Bias, model_log_probs
from decide.quality.metrics import Scores

SCORES = Path("build/scores")


def scored(decider: Decider, path: str, limit: int | None) -> tuple[list[Scored], float]:
    """The file's scored groups and the seconds scoring took, from build/scores when this run was made before."""
    key = f"{Path(path).stem}-{limit or 'all'}-{decider.model_id}-{decider.parts.backend.name}-{decider.loaded.precision}.pkl"
    cached = SCORES / key
    if cached.exists():
        return pickle.loads(cached.read_bytes())
    start = time.perf_counter()
    result = score(decider, load(path)[:limit]), time.perf_counter() - start
    SCORES.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(pickle.dumps(result))
    return result


def row(name: str, p: np.ndarray, y: np.ndarray, note: str = "") -> str:
    s = Scores.of(p, y)
    return f"  {name:<22} {s.accuracy:8.3f} {s.macro_f1:8.3f} {s.ece:6.3f} {s.log_loss:8.3f}  {note}"


def dev_probabilities(entry, dev: Scored) -> np.ndarray:
    return np.stack([entry.probabilities(ll, h) for ll, h in zip(dev.log_likelihoods, dev.hidden)])


def compare(train: Scored, dev: Scored, n_layers: int, sizes: list[int]) -> None:
    lp, y = model_log_probs(np.stack(train.log_likelihoods)), train.y
    dev_lp, y_dev = model_log_probs(np.stack(dev.log_likelihoods)), dev.y
    print(f"{train.name}: {len(y)} training, {len(y_dev)} dev examples, {len(train.question.options)} options")
    print(f"  {'dev':<22} {'accuracy':>8} {'macro-F1':>8} {'ECE':>6} {'log loss':>8}")
    print(row("none", np.stack([softmax(ll) for ll in dev.log_likelihoods]), y_dev))
    print(row("bias", Bias.fit(lp, y).probabilities(dev_lp), y_dev))
    states, dev_states = layer_states(train), layer_states(dev)
    for layer in states:
        readout, loss = fit_readout({layer: states[layer]}, lp, y)
        p = readout.probabilities(dev_states[layer], dev_lp)
        name = f"layer {layer}" + (" (last)" if layer == n_layers else "")
        print(row(name, p, y_dev, f"cv log loss {loss:.3f}, L2 {readout.l2:g}"))
    readout, loss = fit_readout(states, lp, y, max_layers=1)
    p = readout.probabilities(readout_states(readout, dev), dev_lp)
    print(row("best one layer", p, y_dev, f"cv log loss {loss:.3f}, {readout.described}, L2 {readout.l2:g}"))
    readout, loss = fit_readout(states, lp, y)
    p = readout.probabilities(readout_states(readout, dev), dev_lp)
    print(row("best layers", p, y_dev, f"cv log loss {loss:.3f}, {readout.described}, L2 {readout.l2:g}"))
    start = time.perf_counter()
    entry = fit_question(train)
    seconds = time.perf_counter() - start
    print(row("decide fit", dev_probabilities(entry, dev), y_dev, f"chose {described(entry)}; fit {seconds:.1f} s"))
    for n in (n for n in sizes if n < len(y)):
        entry = fit_question(train.subset(range(n)))
        print(row(f"decide fit, {n} labels", dev_probabilities(entry, dev), y_dev, f"chose {described(entry)}"))


def readout_states(readout, dev: Scored) -> np.ndarray:
    return np.stack([readout.state(h) for h in dev.hidden])


def described(entry) -> str:
    return entry.method + (f", {entry.readout.described}" if entry.method == "readout" else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("train")
    ap.add_argument("dev")
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--limit", type=int, default=None, help="the first N training examples")
    ap.add_argument("--dev-limit", type=int, default=None)
    ap.add_argument(
        "--sizes", default="50,100,200,400", help="fit also on the first N training labels (comma-separated)"
    )
    args = ap.parse_args()
    decider = Decider.load(args.model)
    train, train_s = scored(decider, args.train, args.limit)
    dev, dev_s = scored(decider, args.dev, args.dev_limit)
    n = sum(len(g.labels) for g in train) + sum(len(g.labels) for g in dev)
    print(
        f"{decider.model_id} on {decider.parts.backend.name}, readout layers {decider.parts.readout_layers}: "
        f"scoring {train_s + dev_s:.0f} s for {n} labelled answers ({(train_s + dev_s) / n:.2f} s each)"
    )
    by_question = {g.question: g for g in dev}
    for g in train:
        if g.question in by_question:
            compare(g, by_question[g.question], len(decider.parts.layers), [int(n) for n in args.sizes.split(",")])


if __name__ == "__main__":
    main()
