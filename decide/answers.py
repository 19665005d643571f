"""Answers and the statistics of a distribution over a question's options: confidence and score."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the request model imports the kinds, which import the statistics below
    from .request import Option, Question


def softmax(log_likelihoods: Sequence[float]) -> np.ndarray:
    x = np.asarray(log_likelihoods, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def mode(p: Sequence[float]) -> int:
    """Index of the largest probability, first on ties."""
    return int(np.argmax(np.asarray(p)))


def choice_confidence(p: Sequence[float]) -> float:
    n = len(p)
    if n == 1:
        return 1.0
    return float(min(1.0, max(0.0, (n * max(p) - 1.0) / (n - 1))))


def uniform_spread(n: int) -> float:
    """Expected distance from the centre under a uniform distribution over n levels."""
    return sum(abs(i - (n - 1) / 2) for i in range(n)) / n


def score_confidence(p: Sequence[float]) -> float:
    n = len(p)
    if n == 1:
        return 1.0
    m = mode(p)
    spread = sum(pi * abs(i - m) for i, pi in enumerate(p))
    return float(min(1.0, max(0.0, 1.0 - spread / uniform_spread(n))))


def expected_score(p: Sequence[float]) -> float:
    return float(sum(i * pi for i, pi in enumerate(p)))


@dataclass(frozen=True)
class Answer:
    """A question's answer: the distribution over its options and what follows from it."""

    question: Question
    probabilities: tuple[float, ...]
    log_likelihoods: tuple[float, ...]
    # The readout layers' hidden states at the answer position (the last prompt token), by layer number, when
    # the scorer keeps them (see ScoreResult.hidden).
    hidden: dict[int, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @property
    def kind(self) -> str:
        return self.question.kind

    @property
    def best(self) -> Option:
        return self.question.options[mode(self.probabilities)]

    @property
    def probability(self) -> float:
        """P(true) for a predicate; the top probability otherwise."""
        return self.question.spec.probability(self.probabilities)

    @property
    def confidence(self) -> float | None:
        return self.question.spec.confidence(self.probabilities)

    @property
    def score(self) -> float | None:
        return self.question.spec.score(self.probabilities)


@dataclass(frozen=True)
class Usage:
    """Token counts of one request as the protocols report them, plus what the model really computed."""

    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    computed_tokens: int = 0


@dataclass(frozen=True)
class Decision:
    model: str
    answers: tuple[Answer, ...]
    usage: Usage
