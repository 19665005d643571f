"""A labelled set through a Decider: raw scores once, then every calibration mode from them.

The raw log-likelihoods (and hidden states) of every labelled question are computed once;
each mode's probabilities follow post hoc: `none` is their softmax, a calibration divides out
its prior (the same question scored on content-free inputs, once per distinct question), a
profile applies its fit.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from ..request import DecisionRequest, Question, Text
from . import calibration
from .data import Example
from .metrics import Scores, confusion

BATCH = 8  # examples per decide_batch call


@dataclass
class Scored:
    """Every labelled answer to one question (same kind, instructions and options), in file order."""

    name: str
    question: Question
    labels: list[int] = field(default_factory=list)
    log_likelihoods: list[np.ndarray] = field(default_factory=list)
    hidden: list[np.ndarray | None] = field(default_factory=list)

    @property
    def y(self) -> np.ndarray:
        return np.asarray(self.labels)

    @property
    def has_hidden(self) -> bool:
        return all(h is not None for h in self.hidden)

    def subset(self, idx: Sequence[int]) -> Scored:
        return Scored(
            self.name,
            self.question,
            [self.labels[i] for i in idx],
            [self.log_likelihoods[i] for i in idx],
            [self.hidden[i] for i in idx],
        )


def score(decider, examples: Sequence[Example], progress: bool = True) -> list[Scored]:
    """Raw scores of every labelled question, grouped by question."""
    groups: dict[Question, Scored] = {}
    bar = tqdm(total=len(examples), desc="scoring", unit="example", file=sys.stderr, disable=not progress)
    for start in range(0, len(examples), BATCH):
        chunk = examples[start : start + BATCH]
        for ex, outcome in zip(chunk, decider.decide_batch([ex.request for ex in chunk])):
            if isinstance(outcome, Exception):
                raise type(outcome)(f"line {ex.line}: {outcome}")
            for qid, label, answer in zip(ex.ids, ex.labels, outcome.answers):
                if label is not None:
                    g = groups.setdefault(answer.question, Scored(qid, answer.question))
                    g.labels.append(label)
                    g.log_likelihoods.append(np.asarray(answer.log_likelihoods))
                    g.hidden.append(answer.hidden)
        bar.update(len(chunk))
    bar.close()
    return list(groups.values())


def priors(decider, questions: Sequence[Question], methods: Sequence[str]) -> dict[tuple[str, Question], np.ndarray]:
    """Each method's prior for each question; a content-free input shared by methods is scored once."""
    texts = sorted({t for m in methods for t in calibration.CONTENT_FREE[m]})
    requests = [DecisionRequest((Text(t),), (q,)) for q in questions for t in texts]
    decisions = decider.decide_batch(requests) if requests else []
    lls = {(r.questions[0], r.input[0].text): d.answers[0].log_likelihoods for r, d in zip(requests, decisions)}
    return {
        (m, q): calibration.prior([lls[q, t] for t in calibration.CONTENT_FREE[m]])
        for m in methods
        if m != "none"
        for q in questions
    }


def batch_prior(scored: Scored) -> np.ndarray:
    """Batch calibration (Zhou et al. 2023): the log of the mean answer distribution over the evaluated inputs."""
    return calibration.prior(scored.log_likelihoods)


def probabilities(scored: Scored, mode: str, found_priors: dict, profile=None) -> np.ndarray:
    """p[n, k] of one mode: a calibration method, "batch" (eval only: it needs the whole set), or "profile"."""
    if mode == "batch":
        prior = batch_prior(scored)
        return np.stack([calibration.calibrated(ll, prior) for ll in scored.log_likelihoods])
    if mode == "profile":
        entry = profile.entry(scored.question) if profile is not None else None
        if entry is None:
            raise ValueError(f"the profile has no fit for question {scored.name!r}")
        return np.stack([entry.probabilities(ll, h) for ll, h in zip(scored.log_likelihoods, scored.hidden)])
    prior, adjust = found_priors.get((mode, scored.question)), calibration.BY_NAME[mode].adjust
    return np.stack([calibration.calibrated(ll, prior, adjust) for ll in scored.log_likelihoods])


def evaluate(decider, examples: Sequence[Example], modes: Sequence[str], profile=None, progress: bool = True):
    """{question name: {mode: (Scores, p)}} plus the Scored groups (labels and raw scores). Every mode comes from
    one scoring run of the plain prompts, except those whose prompts differ: a profile that shows
    demonstrations and a calibration that writes examples are each measured on a run of their own."""
    own_run = [m for m in modes if _prompts_differ(m, profile)]
    plain = decider.with_profile(None).with_calibration("none")
    groups: list[Scored] = []
    table: dict = {}
    if len(own_run) < len(modes):
        groups = score(plain, examples, progress)
        table = tabulate(plain, groups, [m for m in modes if m not in own_run], profile)
    for mode in own_run:
        other = decider.with_profile(profile) if mode == "profile" else plain.with_calibration(mode)
        scored = score(other, examples, progress)
        groups = groups or scored
        for g in scored:
            table.setdefault(g.name, {}).update(tabulate(other, [g], [mode], profile)[g.name])
    return table, groups


def _prompts_differ(mode: str, profile) -> bool:
    if mode == "profile":
        return profile is not None and profile.shows_demonstrations
    return calibration.writes_examples(mode)


def tabulate(decider, groups: list[Scored], modes: Sequence[str], profile=None) -> dict:
    found = priors(decider, [g.question for g in groups], [m for m in modes if m in calibration.METHODS])
    table = {}
    for g in groups:
        table[g.name] = {}
        for mode in modes:
            if mode == "profile" and (profile is None or profile.entry(g.question) is None):
                continue  # a question the profile does not know is answered as without it
            p = probabilities(g, mode, found, profile)
            table[g.name][mode] = (Scores.of(p, g.y), p)
    return table


def report(table: dict, groups: list[Scored], out=None) -> None:
    out = out or sys.stdout
    for g in groups:
        rows = table[g.name]
        labels = [str(o.value) for o in g.question.options]
        print(f"\n{g.name} ({g.question.kind}, {len(g.labels)} labelled): {g.question.instructions}", file=out)
        print(f"  {'mode':<12} {'accuracy':>8} {'macro-F1':>8} {'Brier':>7} {'log loss':>8} {'ECE':>6}", file=out)
        for mode, (s, _) in rows.items():
            print(
                f"  {mode:<12} {s.accuracy:8.3f} {s.macro_f1:8.3f} {s.brier:7.3f} {s.log_loss:8.3f} {s.ece:6.3f}",
                file=out,
            )
        for mode, (_, p) in rows.items():
            print_confusion(confusion(p, g.y), labels, f"confusion ({mode}; rows: label, columns: answer)", out)


def print_confusion(c: np.ndarray, labels: list[str], title: str, out) -> None:
    width = max(6, *(len(x) for x in labels)) if labels else 6
    short = [x[:width] for x in labels]
    print(f"  {title}", file=out)
    print("  " + " " * width + " " + " ".join(f"{x:>{width}}" for x in short), file=out)
    for label, row in zip(short, c):
        print(f"  {label:>{width}} " + " ".join(f"{v:>{width}d}" for v in row), file=out)


def plot(table: dict, groups: list[Scored], path: str) -> None:
    """Reliability diagram: per question, accuracy against confidence of the top answer, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .metrics import reliability

    fig, axes = plt.subplots(1, len(groups), figsize=(4.5 * len(groups), 4.5), squeeze=False)
    for ax, g in zip(axes[0], groups):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect")
        for mode, (s, p) in table[g.name].items():
            points = reliability(p, g.y)
            ax.plot([c for c, _, _ in points], [a for _, a, _ in points], marker="o", label=f"{mode} (ECE {s.ece:.3f})")
        ax.set(title=g.name, xlabel="confidence of the top answer", ylabel="accuracy", xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
