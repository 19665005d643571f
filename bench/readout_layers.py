"""Which layer's hidden state at the answer position makes the best fitted readout?

For each labelled example, runs the question's prompt once through the model (causally, on the
engine's kernels) and keeps every layer's output at the last prompt token. Then, per layer, fits the
readout `decide fit` uses (standardized features, multinomial logistic regression, L2 chosen by
cross-validation on the training examples) and prints its accuracy on the dev examples; last, the readout
of two layers side by side (two thirds deep, and the final one). One forward per example, so every
layer is measured in one run.

    python -m bench.readout_layers build/eval/trec-w0-train.jsonl build/eval/trec-w0-dev.jsonl --limit 400
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from tqdm import tqdm

from decide.core import Decider
from decide.quality.data import load
from decide.quality.fitting import L2_GRID, cross_validated, fit_logistic, log_softmax
from decide.runtime import mx
from decide.scoring.adapter.forest_pass import CausalCache, causal_forward


class Tap:
    """A decoder layer that also keeps its output at the last token."""

    def __init__(self, layer, kept: list) -> None:
        self.layer, self.kept = layer, kept

    def __getattr__(self, name: str):  # model code reads attributes of its layers
        return getattr(self.layer, name)

    def __call__(self, x, mask=None, cache=None):
        out = self.layer(x, mask, cache)
        self.kept.append(out[0, -1])
        return out


def residuals(decider: Decider, path: str, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    """hidden[n, layers, D] (each layer's output at the answer position; the last one normed) and labels[n]."""
    from mlx_lm.models.cache import KVCache  # after decide.runtime, which loads the BLAS MLX links

    inner, parts = decider.loaded.model.model, decider.parts
    examples = [ex for ex in load(path)[:limit] if ex.labels[0] is not None]
    states, labels, kept = [], [], []
    layers = list(inner.layers)
    inner.layers[:] = [Tap(layer, kept) for layer in layers]
    try:
        for ex in tqdm(examples, desc=path, unit="example", file=sys.stderr):
            kept.clear()
            caches = [CausalCache(KVCache(), parts.backend) for _ in layers]
            final = causal_forward(parts.body, caches, decider.prompts.tokenize(ex.request)[0].prompt)[0, -1]
            states.append(np.asarray(mx.stack([*kept[:-1], final]).astype(mx.float32)))
            labels.append(ex.labels[0])
    finally:
        inner.layers[:] = layers
    return np.stack(states).astype(np.float64), np.asarray(labels)


def readout_accuracy(train: np.ndarray, y: np.ndarray, dev: np.ndarray, y_dev: np.ndarray, k: int) -> float:
    mean, std = train.mean(axis=0), train.std(axis=0) + 1e-6
    x, x_dev = (train - mean) / std, (dev - mean) / std

    def cv(l2):
        def run(tr, held):
            w, b = fit_logistic(x[tr], y[tr], k, l2)
            return np.exp(log_softmax(x[held] @ w + b)), y[held]

        return run

    best = min(L2_GRID, key=lambda l2: cross_validated(cv(l2), len(y)))
    w, b = fit_logistic(x, y, k, best)
    return float(np.mean((x_dev @ w + b).argmax(axis=1) == y_dev))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("train")
    ap.add_argument("dev")
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--limit", type=int, default=None, help="the first N training examples")
    ap.add_argument("--dev-limit", type=int, default=None)
    args = ap.parse_args()
    decider = Decider.load(args.model)
    k = len(load(args.train)[0].request.questions[0].options)
    train, y = residuals(decider, args.train, args.limit)
    dev, y_dev = residuals(decider, args.dev, args.dev_limit)
    n_layers = train.shape[1]
    print(f"{decider.model_id}: {len(y)} training, {len(y_dev)} dev examples, {k} options, {n_layers} layers")
    print(f"{'layer':>5} {'dev accuracy':>12}")
    for layer in range(n_layers):
        acc = readout_accuracy(train[:, layer], y, dev[:, layer], y_dev, k)
        print(
            f"{layer + 1:>5} {acc:12.3f}"
            + ("  (final, normed: what decide fit reads)" if layer == n_layers - 1 else "")
        )
    mid = round(2 * n_layers / 3) - 1
    both = readout_accuracy(
        train[:, [mid, -1]].reshape(len(y), -1), y, dev[:, [mid, -1]].reshape(len(y_dev), -1), y_dev, k
    )
    print(f"layers {mid + 1} and {n_layers} side by side: {both:.3f}")


if __name__ == "__main__":
    main()
