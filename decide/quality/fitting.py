"""Fitted readouts from labels: multinomial logistic regression in numpy, by accelerated gradient descent.

Two readouts of a question's answer, both convex to fit:
- `Bias`: a temperature and a per-option bias on the model's log-probabilities
  (p = softmax(scale · log p_model + bias)); a few dozen labels suffice;
- `Readout`: a linear map of the hidden state at the answer position after one or a few layers
  (concatenated), standardized, next to the model's log-probabilities; a few hundred labels.
The layers and L2 strength of a readout are chosen by k-fold cross-validated log loss (fit.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..answers import softmax

L2_GRID = (1e-3, 1e-2, 1e-1, 1.0)
FOLDS = 4
STEPS = 400
LOG_FLOOR = 30.0  # log-probabilities below -30 carry no more information and would slow the fit
BIAS_L2 = 1e-3


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def fit_logistic(x: np.ndarray, y: np.ndarray, k: int, l2: float, steps: int = STEPS) -> tuple[np.ndarray, np.ndarray]:
    """W[d, k], b[k] minimizing mean cross-entropy of softmax(x W + b) + l2/2 |W|² (Nesterov, step 1/L),
    in x's float type."""
    n, d = x.shape
    onehot = np.eye(k, dtype=x.dtype)[y]
    # The loss's gradient is Lipschitz with L ≤ λmax(xᵀx/n)/2 + l2 (+ the bias column's 1/2).
    lipschitz = top_eigenvalue(x) / n / 2 + l2 + 0.5
    w, b = np.zeros((d, k), x.dtype), np.zeros(k, x.dtype)
    w_prev, b_prev = w, b
    for t in range(1, steps + 1):
        momentum = (t - 1) / (t + 2)
        vw, vb = w + momentum * (w - w_prev), b + momentum * (b - b_prev)
        err = np.exp(log_softmax(x @ vw + vb)) - onehot
        w_prev, b_prev = w, b
        w = vw - (x.T @ err / n + l2 * vw) / lipschitz
        b = vb - err.mean(axis=0) / lipschitz
    return w, b


def top_eigenvalue(x: np.ndarray) -> float:
    """λmax(xᵀx) = |x|₂², from the smaller Gram matrix (a few times faster than an SVD)."""
    gram = x @ x.T if x.shape[0] < x.shape[1] else x.T @ x
    return float(np.linalg.eigvalsh(gram)[-1])


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y], 1e-12))))


@dataclass(frozen=True)
class Bias:
    scale: float
    bias: np.ndarray

    @classmethod
    def fit(cls, log_probs: np.ndarray, y: np.ndarray, steps: int = 4 * STEPS) -> Bias:
        """Scale and bias minimizing the cross-entropy (+ a light L2 on the bias) on (n, k) log-probabilities."""
        lp = np.maximum(log_probs, -LOG_FLOOR)
        onehot = np.eye(lp.shape[1])[y]
        # Block step sizes: the scale's gradient is Lipschitz with ≤ mean |lp|², the bias's with ≤ 1/2.
        step_scale, step_bias = 1 / (np.mean((lp**2).sum(axis=1)) + 1e-9), 1 / (0.5 + BIAS_L2)
        a, b, a_prev, b_prev = 1.0, np.zeros(lp.shape[1]), 1.0, np.zeros(lp.shape[1])
        for t in range(1, steps + 1):
            momentum = (t - 1) / (t + 2)
            va, vb = a + momentum * (a - a_prev), b + momentum * (b - b_prev)
            err = np.exp(log_softmax(va * lp + vb)) - onehot
            a_prev, b_prev = a, b
            a = va - step_scale * float(np.mean((err * lp).sum(axis=1)))
            b = vb - step_bias * (err.mean(axis=0) + BIAS_L2 * vb)
        return cls(a, b - b.mean())

    def probabilities(self, log_probs: np.ndarray) -> np.ndarray:
        return np.exp(log_softmax(self.scale * np.maximum(log_probs, -LOG_FLOOR) + self.bias))


@dataclass(frozen=True)
class Readout:
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray  # [d + k, k]: hidden state, then the model's log-probabilities
    bias: np.ndarray
    l2: float
    layers: tuple[int, ...] = ()  # whose states it reads, concatenated (1-based); (): the last (format 1)

    @classmethod
    def fit(
        cls, hidden: np.ndarray, log_probs: np.ndarray, y: np.ndarray, l2: float, layers: tuple[int, ...] = ()
    ) -> Readout:
        mean, std = hidden.mean(axis=0), hidden.std(axis=0) + 1e-6
        x = features(hidden, log_probs, mean, std)
        w, b = fit_logistic(x, y, log_probs.shape[1], l2)
        return cls(mean, std, w, b, l2, tuple(layers))

    def state(self, hidden: dict[int, np.ndarray]) -> np.ndarray | None:
        """The state this readout reads, from a scorer's states by layer; None when one of its layers is missing."""
        if not self.layers:
            return hidden[max(hidden)]
        if any(layer not in hidden for layer in self.layers):
            return None
        return np.concatenate([np.asarray(hidden[layer]) for layer in self.layers])

    @property
    def described(self) -> str:
        if not self.layers:
            return "the last layer"
        return ("layer " if len(self.layers) == 1 else "layers ") + " + ".join(map(str, self.layers))

    def probabilities(self, hidden: np.ndarray, log_probs: np.ndarray) -> np.ndarray:
        return np.exp(log_softmax(features(hidden, log_probs, self.mean, self.std) @ self.weights + self.bias))


def features(hidden: np.ndarray, log_probs: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """The standardized state, then the log-probabilities, in the state's float type."""
    state = (hidden - mean) / std
    return np.concatenate([state, log_probs.astype(state.dtype)], axis=-1)


def folds(n: int, k: int = FOLDS, seed: int = 0) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng(seed).permutation(n), k)


def cross_validated(fit_predict, n: int) -> float:
    """Mean held-out log loss of `fit_predict(train_idx, test_idx) -> (p, y_test)` over the folds."""
    losses = []
    for held in folds(n):
        train = np.setdiff1d(np.arange(n), held)
        p, y = fit_predict(train, held)
        losses.append(log_loss(p, y))
    return float(np.mean(losses))


def model_log_probs(log_likelihoods: np.ndarray) -> np.ndarray:
    """Rows of raw log-likelihoods → log-softmax per row (what the model answers, normalized)."""
    return np.log(np.maximum(np.stack([softmax(r) for r in log_likelihoods]), 1e-300))
