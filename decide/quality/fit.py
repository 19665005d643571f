"""`decide fit`: per question, a temperature + bias and a hidden-state readout, the better kept.

With fewer than READOUT_MIN labels only the bias is fitted. Otherwise both are (the readout on the
layer and at the L2 strength `fit_readout` chooses), and the one with the lower cross-validated log
loss on the training labels answers (the bias stays stored as the fallback for scorers that do not
keep hidden states).
"""

from __future__ import annotations

import numpy as np

from .evaluate import Scored
from .fitting import L2_GRID, Bias, Readout, cross_validated, folds, model_log_probs
from .profile import Entry, Profile, model_fingerprint, question_key

MIN_LABELS = 8
READOUT_MIN = 100


def fit_question(g: Scored) -> Entry:
    lp, y = model_log_probs(np.stack(g.log_likelihoods)), g.y
    bias = Bias.fit(lp, y)
    if len(y) < READOUT_MIN or not g.has_hidden:
        return Entry(g.question.instructions, "bias", bias)

    def bias_cv(train, held):
        return Bias.fit(lp[train], y[train]).probabilities(lp[held]), y[held]

    readout, loss = fit_readout(layer_states(g), lp, y)
    method = "readout" if loss < cross_validated(bias_cv, len(y)) else "bias"
    return Entry(g.question.instructions, method, bias, readout)


def layer_states(g: Scored) -> dict[int, np.ndarray]:
    """{layer: hidden[n, D]} for every layer all of the group's answers kept."""
    layers = sorted(set.intersection(*(set(h) for h in g.hidden)))
    return {layer: np.stack([h[layer] for h in g.hidden]).astype(np.float64) for layer in layers}


def fit_readout(states: dict[int, np.ndarray], lp: np.ndarray, y: np.ndarray) -> tuple[Readout, float]:
    """The readout of the layer and L2 with the lowest cross-validated log loss, fitted on all labels; that loss.

    The layer is chosen at L2_GRID's middle strength, then the strength for that layer (the best strength
    hardly depends on the layer: the features are standardized), so 8 cross-validations run instead of 20."""

    def cv(layer, l2):
        def run(train, held):
            x = states[layer]
            return Readout.fit(x[train], lp[train], y[train], l2).probabilities(x[held], lp[held]), y[held]

        return cross_validated(run, len(y))

    middle = L2_GRID[len(L2_GRID) // 2]
    by_layer = {layer: cv(layer, middle) for layer in states}
    layer = min(by_layer, key=by_layer.get)
    losses = {l2: by_layer[layer] if l2 == middle else cv(layer, l2) for l2 in L2_GRID}
    l2 = min(losses, key=losses.get)
    return Readout.fit(states[layer], lp, y, l2, layer), losses[l2]


def fit_profile(decider, groups: list[Scored]) -> Profile:
    """A profile of every question with at least MIN_LABELS labels and more than one option."""
    profile = Profile(decider.model_id, model_fingerprint(decider.loaded))
    for g in groups:
        if len(g.labels) >= MIN_LABELS and len(g.question.options) > 1:
            profile.entries[question_key(g.question)] = fit_question(g)
    return profile


def cross_validated_probabilities(g: Scored, k: int) -> np.ndarray:
    """p[n, options]: each example answered by the fit of the other folds (an honest dev estimate)."""
    p = np.zeros((len(g.labels), len(g.question.options)))
    for held in folds(len(g.labels), k, seed=1):
        entry = fit_question(g.subset(np.setdiff1d(np.arange(len(g.labels)), held)))
        for i in held:
            p[i] = entry.probabilities(g.log_likelihoods[i], g.hidden[i])
    return p
