"""Scores of probabilistic answers against labels: y[n] option indices, p[n, k] distributions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ECE_BINS = 10


def accuracy(p: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(p.argmax(axis=1) == y))


def confusion(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """counts[true, predicted]."""
    k = p.shape[1]
    return np.bincount(y * k + p.argmax(axis=1), minlength=k * k).reshape(k, k)


def macro_f1(p: np.ndarray, y: np.ndarray) -> float:
    """Mean F1 over the options that occur as a label or a prediction."""
    c = confusion(p, y)
    tp, predicted, actual = np.diag(c), c.sum(axis=0), c.sum(axis=1)
    present = (predicted + actual) > 0
    f1 = 2 * tp[present] / (predicted[present] + actual[present])
    return float(f1.mean())


def brier(p: np.ndarray, y: np.ndarray) -> float:
    """Mean squared distance to the one-hot label, summed over options."""
    return float(np.mean(((p - np.eye(p.shape[1])[y]) ** 2).sum(axis=1)))


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y], 1e-12))))


def reliability(p: np.ndarray, y: np.ndarray, bins: int = ECE_BINS) -> list[tuple[float, float, int]]:
    """Per equal-width bin of top-answer confidence: (mean confidence, accuracy, count); empty bins skipped."""
    conf, right = p.max(axis=1), p.argmax(axis=1) == y
    which = np.minimum((conf * bins).astype(int), bins - 1)
    return [
        (float(conf[which == b].mean()), float(right[which == b].mean()), int((which == b).sum()))
        for b in range(bins)
        if (which == b).any()
    ]


def ece(p: np.ndarray, y: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error of the top answer: Σ_bins (count/n)·|accuracy − confidence|."""
    return float(sum(n * abs(acc - conf) for conf, acc, n in reliability(p, y, bins)) / len(y))


@dataclass(frozen=True)
class Scores:
    n: int
    accuracy: float
    macro_f1: float
    brier: float
    log_loss: float
    ece: float

    @classmethod
    def of(cls, p: np.ndarray, y: np.ndarray) -> Scores:
        return cls(len(y), accuracy(p, y), macro_f1(p, y), brier(p, y), log_loss(p, y), ece(p, y))
