"""`decide fit`: per question, a temperature + bias and a hidden-state readout, the better kept.

With fewer than READOUT_MIN labels only the bias is fitted. Otherwise both are (the readout on the
layers and at the L2 strength `fit_readout` chooses), and the one with the lower cross-validated log
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
MAX_LAYERS = 3  # states concatenated in one readout


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
    """{layer: hidden[n, D]} for every layer all of the group's answers kept, in float32: the fits run
    at twice float64's speed, and the states come from float32 (or coarser) activations."""
    layers = sorted(set.intersection(*(set(h) for h in g.hidden)))
    return {layer: np.stack([h[layer] for h in g.hidden]).astype(np.float32) for layer in layers}


def fit_readout(
    states: dict[int, np.ndarray], lp: np.ndarray, y: np.ndarray, max_layers: int = MAX_LAYERS
) -> tuple[Readout, float]:
    """The readout of the layers and L2 with the lowest cross-validated log loss, fitted on all labels; that loss.

    The layers are chosen at L2_GRID's middle strength (`choose_layers`), then the strength for them (the
    best strength hardly depends on the layers: the features are standardized)."""

    def cv(layers: tuple[int, ...], l2: float) -> float:
        x = np.concatenate([states[layer] for layer in layers], axis=1)

        def run(train, held):
            return Readout.fit(x[train], lp[train], y[train], l2).probabilities(x[held], lp[held]), y[held]

        return cross_validated(run, len(y))

    middle = L2_GRID[len(L2_GRID) // 2]
    layers, loss = choose_layers(tuple(states), lambda chosen: cv(chosen, middle), max_layers)
    losses = {l2: loss if l2 == middle else cv(layers, l2) for l2 in L2_GRID}
    l2 = min(losses, key=losses.get)
    x = np.concatenate([states[layer] for layer in layers], axis=1)
    return Readout.fit(x, lp, y, l2, layers), losses[l2]


def choose_layers(available: tuple[int, ...], loss, max_layers: int = MAX_LAYERS) -> tuple[tuple[int, ...], float]:
    """Forward selection: the layer with the lowest `loss((layer,))`, then, up to max_layers, the layer whose
    state added to the chosen ones lowers the loss most, while it lowers it (layers of different depth
    carry different parts of the answer: on TREC a middle layer and the last together beat either)."""
    chosen, best = (), float("inf")
    while len(chosen) < max_layers:
        trials = {tuple(sorted((*chosen, layer))): None for layer in available if layer not in chosen}
        for layers in trials:
            trials[layers] = loss(layers)
        if not trials or min(trials.values()) >= best:
            break
        chosen = min(trials, key=trials.get)
        best = trials[chosen]
    return chosen, best


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
