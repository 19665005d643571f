"""Metrics against slow loops; fitted readouts recover planted signals."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decide.quality import metrics
from decide.quality.evaluate import Scored
from decide.quality.fit import choose_layers, fit_question, fit_readout, layer_states
from decide.quality.fitting import Bias, Readout, fit_logistic, log_softmax, model_log_probs
from decide.request import Question


def random_case(seed: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(k, 0.5), size=n)
    return p, rng.integers(0, k, size=n)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), k=st.integers(2, 6))
def test_metrics_equal_slow_loops(seed, n, k):
    p, y = random_case(seed, n, k)
    top = [max(range(k), key=lambda j: (p[i, j], -j)) for i in range(n)]
    assert metrics.accuracy(p, y) == sum(t == yi for t, yi in zip(top, y)) / n
    brier = sum(sum((p[i, j] - (j == y[i])) ** 2 for j in range(k)) for i in range(n)) / n
    assert np.isclose(metrics.brier(p, y), brier)
    # A probability below 1e-12 counts as 1e-12: one confident miss must not make the mean infinite.
    assert np.isclose(metrics.log_loss(p, y), -sum(np.log(max(p[i, y[i]], 1e-12)) for i in range(n)) / n)
    ece = 0.0
    for b in range(10):
        members = [i for i in range(n) if min(int(p[i].max() * 10), 9) == b]
        if members:
            conf = sum(p[i].max() for i in members) / len(members)
            acc = sum(top[i] == y[i] for i in members) / len(members)
            ece += len(members) / n * abs(acc - conf)
    assert np.isclose(metrics.ece(p, y), ece)
    f1s = []
    for j in range(k):
        tp = sum(top[i] == j and y[i] == j for i in range(n))
        pred, actual = sum(t == j for t in top), sum(yi == j for yi in y)
        if pred + actual:
            f1s.append(2 * tp / (pred + actual))
    assert np.isclose(metrics.macro_f1(p, y), np.mean(f1s))


def test_logistic_fit_reaches_the_optimum_of_a_slow_gradient_check():
    """At the returned weights the gradient of the regularized loss is ~0 (checked by finite differences)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(80, 5)), rng.integers(0, 3, size=80)
    w, b = fit_logistic(x, y, 3, l2=0.1, steps=3000)

    def loss(w_, b_):
        return -np.mean(log_softmax(x @ w_ + b_)[np.arange(80), y]) + 0.05 * (w_**2).sum()

    for i, j in [(0, 0), (2, 1), (4, 2)]:
        e = np.zeros_like(w)
        e[i, j] = 1e-5
        assert abs((loss(w + e, b) - loss(w - e, b)) / 2e-5) < 1e-4


def test_the_bias_fit_removes_a_planted_prior():
    """The model prefers option 0 by a constant; the labels do not: the fitted bias undoes the preference."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, size=300)
    signal = 2.0 * np.eye(3)[y] + rng.normal(size=(300, 3))
    skewed = log_softmax(signal + np.array([3.0, 0.0, 0.0]))
    fitted = Bias.fit(skewed, y)
    assert metrics.accuracy(np.exp(skewed), y) < 0.55
    assert metrics.accuracy(fitted.probabilities(skewed), y) > 0.75
    assert fitted.bias[0] < fitted.bias[1] - 2 and fitted.bias[0] < fitted.bias[2] - 2


def test_the_readout_recovers_a_planted_linear_signal():
    """Labels are a linear function of the hidden state that the model's own answer ignores."""
    rng = np.random.default_rng(2)
    d, k = 64, 4
    planted = rng.normal(size=(d, k))
    hidden = rng.normal(size=(600, d)) * 3 + 1
    y = (hidden @ planted).argmax(axis=1)
    useless = log_softmax(rng.normal(size=(600, k)))
    readout = Readout.fit(hidden[:400], useless[:400], y[:400], l2=1e-3)
    held = readout.probabilities(hidden[400:], useless[400:])
    assert metrics.accuracy(held, y[400:]) > 0.85
    assert metrics.accuracy(np.exp(useless[400:]), y[400:]) < 0.4


def planted_group(n: int, signal_layers: int | tuple[int, ...], layers=(3, 5, 8), seed: int = 4) -> Scored:
    """Labels a linear function of some layers' states; the other layers and the model's own answer are noise."""
    rng = np.random.default_rng(seed)
    d, k = 32, 3
    question = Question.choice("Which?", [("a", None), ("b", None), ("c", None)])
    states = {layer: rng.normal(size=(n, d)) for layer in layers}
    signal = [signal_layers] if isinstance(signal_layers, int) else signal_layers
    y = sum(states[layer] @ rng.normal(size=(d, k)) for layer in signal).argmax(axis=1)
    g = Scored("q", question, y.tolist(), list(rng.normal(size=(n, k))))
    g.hidden = [{layer: states[layer][i] for layer in layers} for i in range(n)]
    return g


def test_the_fit_reads_the_layer_that_carries_the_signal():
    for signal in (3, 8):
        g = planted_group(400, signal)
        entry = fit_question(g.subset(range(300)))
        assert entry.method == "readout" and entry.readout.layers == (signal,)
        held = g.subset(range(300, 400))
        p = np.stack([entry.probabilities(ll, h) for ll, h in zip(held.log_likelihoods, held.hidden)])
        assert metrics.accuracy(p, held.y) > 0.8


def test_the_fit_reads_two_layers_when_the_signal_is_split_between_them():
    """Half the signal in layer 3's state, half in layer 8's: either alone answers worse than both."""
    g = planted_group(600, (3, 8))
    entry = fit_question(g.subset(range(450)))
    assert entry.method == "readout" and entry.readout.layers == (3, 8)
    held = g.subset(range(450, 600))
    p = np.stack([entry.probabilities(ll, h) for ll, h in zip(held.log_likelihoods, held.hidden)])
    assert metrics.accuracy(p, held.y) > 0.8
    train, lp = g.subset(range(450)), model_log_probs(np.stack(g.log_likelihoods))
    for layer in (3, 8):
        states = layer_states(train)
        alone, _ = fit_readout({layer: states[layer]}, lp[:450], train.y)
        p_alone = alone.probabilities(np.stack([h[layer] for h in held.hidden]), lp[450:])
        assert metrics.accuracy(p_alone, held.y) < metrics.accuracy(p, held.y) - 0.1


def test_a_readout_whose_layer_is_missing_answers_with_the_bias():
    entry = fit_question(planted_group(300, 5))
    ll = np.array([0.0, -1.0, -2.0])
    want = entry.bias.probabilities(model_log_probs(ll[None]))[0]
    np.testing.assert_allclose(entry.probabilities(ll, {3: np.zeros(32)}), want)
    np.testing.assert_allclose(entry.probabilities(ll, None), want)


def test_layer_selection_adds_a_layer_only_while_the_loss_falls():
    """Forward selection against a made-up loss: the best single layer, then the best addition, then stop."""
    loss = {(1,): 3.0, (2,): 2.0, (3,): 2.5, (1, 2): 1.9, (2, 3): 1.5, (1, 2, 3): 1.6}
    assert choose_layers((1, 2, 3), loss.__getitem__) == ((2, 3), 1.5)
    assert choose_layers((1, 2, 3), {**loss, (2, 3): 2.1, (1, 2): 2.2}.__getitem__) == ((2,), 2.0)
    assert choose_layers((7,), {(7,): 0.5}.__getitem__) == ((7,), 0.5)
