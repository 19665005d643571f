"""`decide fit`: per question, a few labelled demonstrations for its prompt, then a temperature + bias and a
hidden-state readout on the scores of the other labels, the better kept.

A question with at least DEMONSTRATION_MIN labels shows DEMONSTRATIONS of them (at least one per labelled
option, at most MAX_DEMONSTRATIONS; short ones, drawn with a fixed seed) before the input: in-context
examples are the cheapest help a small model gets from labels, and, coming before the input, they are a
prefix the cache shares. Examples shown are not fitted on.

With fewer than READOUT_MIN labels only the bias is fitted. Otherwise both are (the readout on the
layers and at the L2 strength `fit_readout` chooses), and the one with the lower cross-validated log
loss on the training labels answers (the bias stays stored as the fallback for scorers that do not
keep hidden states).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np

from ..prompts import Demonstration
from ..request import Question, Text
from .data import Example
from .evaluate import Scored
from .fitting import L2_GRID, Bias, Readout, cross_validated, folds, model_log_probs
from .profile import Entry, Profile, model_fingerprint, question_key

MIN_LABELS = 8
READOUT_MIN = 100
MAX_LAYERS = 3  # states concatenated in one readout
DEMONSTRATION_MIN = 20
DEMONSTRATIONS = 8
MAX_DEMONSTRATIONS = 8

Shown = dict[Question, list[tuple[int, Demonstration]]]  # per question: (example index, demonstration)


def choose_demonstrations(examples: Sequence[Example], count: int | None = None, seed: int = 0) -> Shown:
    """Per question with DEMONSTRATION_MIN labels or more: `count` (default: DEMONSTRATIONS, and at least one per
    labelled option, up to MAX_DEMONSTRATIONS) text-only examples, taken in turn from its options, the most
    labelled first, each an example no longer than the question's median input while the option has one left,
    in a seeded random order."""
    by_question: dict[Question, dict[int, list[tuple[int, str]]]] = {}
    for i, ex in enumerate(examples):
        if not all(isinstance(p, Text) for p in ex.request.input):
            continue
        text = "".join(p.text for p in ex.request.input)
        for q, label in zip(ex.request.questions, ex.labels):
            if label is not None:
                by_question.setdefault(q, {}).setdefault(label, []).append((i, text))
    rng = random.Random(seed)
    shown: Shown = {}
    for q, by_option in by_question.items():
        labelled = sum(len(v) for v in by_option.values())
        want = count if count is not None else min(MAX_DEMONSTRATIONS, max(DEMONSTRATIONS, len(by_option)))
        if labelled < DEMONSTRATION_MIN or want <= 0:
            continue
        median = float(np.median([len(t) for v in by_option.values() for _, t in v]))
        pools = {o: [e for e in v if len(e[1]) <= median] or v for o, v in by_option.items()}
        order = sorted(pools, key=lambda o: (-len(by_option[o]), o))
        picks: list[tuple[int, Demonstration]] = []
        for o in (order * math.ceil(want / len(order)))[:want]:
            taken = {i for i, _ in picks}
            pool = [e for e in pools[o] if e[0] not in taken] or [e for e in by_option[o] if e[0] not in taken]
            if pool:
                i, text = rng.choice(pool)
                picks.append((i, Demonstration(text, o)))
        rng.shuffle(picks)
        shown[q] = picks
    return shown


def draft_profile(decider, shown: Shown) -> Profile:
    """A profile that only shows the chosen demonstrations (the model's own answers otherwise): what the
    labels are scored with before the fit."""
    profile = Profile(decider.model_id, model_fingerprint(decider.loaded))
    for q, picks in shown.items():
        profile.entries[question_key(q)] = Entry.unfitted(q, tuple(d for _, d in picks))
    return profile


def fit_question(g: Scored, demonstrations: tuple[Demonstration, ...] = ()) -> Entry:
    lp, y = model_log_probs(np.stack(g.log_likelihoods)), g.y
    bias = Bias.fit(lp, y)
    if len(y) < READOUT_MIN or not g.has_hidden:
        return Entry(g.question.instructions, "bias", bias, None, demonstrations)

    def bias_cv(train, held):
        return Bias.fit(lp[train], y[train]).probabilities(lp[held]), y[held]

    readout, loss = fit_readout(layer_states(g), lp, y)
    method = "readout" if loss < cross_validated(bias_cv, len(y)) else "bias"
    return Entry(g.question.instructions, method, bias, readout, demonstrations)


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


def fit_profile(decider, groups: list[Scored], shown: Shown | None = None) -> Profile:
    """A profile of every question with at least MIN_LABELS labels and more than one option; `groups` were
    scored with the `shown` demonstrations."""
    profile = Profile(decider.model_id, model_fingerprint(decider.loaded))
    for g in groups:
        if len(g.labels) >= MIN_LABELS and len(g.question.options) > 1:
            demonstrations = tuple(d for _, d in (shown or {}).get(g.question, ()))
            profile.entries[question_key(g.question)] = fit_question(g, demonstrations)
    return profile


def cross_validated_probabilities(g: Scored, k: int) -> np.ndarray:
    """p[n, options]: each example answered by the fit of the other folds (an honest dev estimate)."""
    p = np.zeros((len(g.labels), len(g.question.options)))
    for held in folds(len(g.labels), k, seed=1):
        entry = fit_question(g.subset(np.setdiff1d(np.arange(len(g.labels)), held)))
        for i in held:
            p[i] = entry.probabilities(g.log_likelihoods[i], g.hidden[i])
    return p
