"""`decide fit`: per question, a temperature + bias and a hidden-state readout, the better kept.

With fewer than READOUT_MIN labels only the bias is fitted. Otherwise both are, and the one with
the lower cross-validated log loss on the training labels answers (the bias stays stored as the
fallback for scorers that do not keep hidden states).
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
    hidden = np.stack(g.hidden).astype(np.float64)

    def bias_cv(train, held):
        return Bias.fit(lp[train], y[train]).probabilities(lp[held]), y[held]

    def readout_cv(l2):
        def run(train, held):
            return Readout.fit(hidden[train], lp[train], y[train], l2).probabilities(hidden[held], lp[held]), y[held]

        return run

    losses = {l2: cross_validated(readout_cv(l2), len(y)) for l2 in L2_GRID}
    best = min(losses, key=losses.get)
    readout = Readout.fit(hidden, lp, y, best)
    method = "readout" if losses[best] < cross_validated(bias_cv, len(y)) else "bias"
    return Entry(g.question.instructions, method, bias, readout)


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
