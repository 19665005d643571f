"""Training-free calibration: correct for the answer prior a question has before any input is seen.

A model asked a question about nothing ("N/A", "", "[MASK]") still prefers some answers: a
favourite option, `true`, the middle level. `contextual` (Zhao et al. 2021, "Calibrate Before
Use") averages the answer distribution over such content-free inputs and divides it out of every
answer of that question; `pmi` (domain-conditional PMI, Holtzman et al. 2021) divides out the
distribution of the question asked about the empty input alone. `temperature` keeps the model's
ranking and only tempers its confidence: a question whose answer the model already "knows" about
the empty input gets its log-likelihoods divided by T = exp(KL(prior ‖ uniform)) = k / perplexity
of the prior (1 for an unbiased question, up to k, the number of answers, for a fully biased one).
`none` is the plain softmax. `examples` asks the question after examples the model wrote for it
(quality/examples.py), then tempers as `temperature` does.

The prior costs one extra scoring of the question per content-free input, once per distinct
question: `PriorCache` keeps them (bounded, least recently used first out).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..answers import softmax
from ..errors import DecideError
from ..request import DecisionRequest, Question
from . import examples


def divide_out(log_likelihoods: np.ndarray, log_prior: np.ndarray) -> np.ndarray:
    return log_likelihoods - log_prior


def temper(log_likelihoods: np.ndarray, log_prior: np.ndarray) -> np.ndarray:
    kl_from_uniform = float(np.sum(np.exp(log_prior) * log_prior)) + np.log(len(log_prior))
    return log_likelihoods / np.exp(kl_from_uniform)


@dataclass(frozen=True)
class Method:
    content_free: tuple[str, ...]  # the inputs whose mean answer distribution is the question's prior
    adjust: Callable[[np.ndarray, np.ndarray], np.ndarray]  # (log-likelihoods, log prior) -> logits
    writes_examples: bool = False  # the question is asked after examples the model wrote (quality/examples.py)


BY_NAME: dict[str, Method] = {
    "none": Method((), divide_out),
    "temperature": Method(("",), temper),
    "contextual": Method(("N/A", "", "[MASK]"), divide_out),
    "pmi": Method(("",), divide_out),
    "examples": Method(("",), temper, writes_examples=True),
}
CONTENT_FREE: dict[str, tuple[str, ...]] = {name: m.content_free for name, m in BY_NAME.items()}
METHODS = tuple(BY_NAME)
# Measured on 9 task wordings (README, "Written examples"): more accurate than none on 8, equal on 1 (asked plainly).
DEFAULT = "examples"


EXAMPLES = "written examples"  # their key in the prior cache


class UnknownCalibration(DecideError, ValueError):
    """A calibration setting that names no method."""


def check_method(name: str) -> str:
    if name not in CONTENT_FREE:
        raise UnknownCalibration(f"unknown calibration {name!r}; choose one of {', '.join(METHODS)}")
    return name


def writes_examples(mode: str) -> bool:
    """Whether `mode` (a method, or an evaluation mode such as `batch`) asks its questions after written examples."""
    return mode in BY_NAME and BY_NAME[mode].writes_examples


def prior_requests(question: Question, method: str) -> list[DecisionRequest]:
    """The question asked about each of the method's content-free inputs (no attachments of the input)."""
    return [DecisionRequest.of(text, (question,)) for text in CONTENT_FREE[method]]


def log_softmax(log_likelihoods: Sequence[float]) -> np.ndarray:
    x = np.asarray(log_likelihoods, dtype=np.float64)
    return x - np.logaddexp.reduce(x)


def prior(log_likelihoods: Sequence[Sequence[float]]) -> np.ndarray:
    """The log of the mean answer distribution over the content-free inputs (in logs: no underflow)."""
    logs = np.stack([log_softmax(lls) for lls in log_likelihoods])
    return np.logaddexp.reduce(logs, axis=0) - np.log(len(logs))


def calibrated(
    log_likelihoods: Sequence[float], log_prior: np.ndarray | None, adjust: Callable = divide_out
) -> np.ndarray:
    """softmax(adjust(lls, log prior)); for `divide_out`, softmax(lls) / prior, renormalized. The plain softmax
    without a prior."""
    if log_prior is None:
        return softmax(log_likelihoods)
    return softmax(adjust(np.asarray(log_likelihoods, dtype=np.float64), log_prior))


class PriorCache:
    """Priors by (method, question), as logs, at most `size` of them; thread-safe. Also holds written examples."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._priors: OrderedDict[tuple[str, Question], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, method: str, question: Question) -> Any:
        with self._lock:
            found = self._priors.get((method, question))
            if found is not None:
                self._priors.move_to_end((method, question))
            return found

    def put(self, method: str, question: Question, value: Any) -> None:
        with self._lock:
            self._priors[(method, question)] = value
            self._priors.move_to_end((method, question))
            while len(self._priors) > self.size:
                self._priors.popitem(last=False)

    def drop(self, method: str, question: Question) -> None:
        with self._lock:
            self._priors.pop((method, question), None)

    def __len__(self) -> int:
        return len(self._priors)


class Calibrator:
    """A Decider's answer probabilities: a profile's fit for the questions it knows, else `method`'s calibration."""

    def __init__(self, method: str, profile=None, cache_size: int = 4096) -> None:
        self.method = check_method(method)
        self.profile = profile
        self.priors = PriorCache(cache_size)

    def with_profile(self, profile) -> Calibrator:
        """The same method and prior cache (a prior does not depend on the profile) with `profile`."""
        other = Calibrator(self.method, profile)
        other.priors = self.priors
        return other

    def with_method(self, method: str) -> Calibrator:
        """The same profile and cache (priors and examples are kept by method) with `method`."""
        other = Calibrator(method, self.profile)
        other.priors = self.priors
        return other

    @property
    def writes_examples(self) -> bool:
        return writes_examples(self.method)

    def demonstrations(self, q: Question) -> tuple:
        """What is shown before the input of `q`: the profile's examples where it fitted `q` (its fit was made on
        such prompts), else the examples the model wrote for `q`, if the method writes them."""
        if self._fitted(q) is not None:
            return self.profile.demonstrations(q)
        return (self.priors.get(EXAMPLES, q) or ()) if self.writes_examples else ()

    def unwritten(self, questions: Sequence[Question]) -> list[Question]:
        """The distinct questions whose examples the method writes and has not written yet."""
        if not self.writes_examples:
            return []
        todo = (q for q in questions if examples.writes_for(q) and self._fitted(q) is None)
        return [q for q in dict.fromkeys(todo) if self.priors.get(EXAMPLES, q) is None]

    def learn_examples(self, q: Question, shown: tuple) -> None:
        """Keep the examples written for `q`; a prior computed before, on the prompt without them, no longer holds."""
        self.priors.put(EXAMPLES, q, shown)
        self.priors.drop(self.method, q)

    def _fitted(self, q: Question):
        return self.profile.entry(q) if self.profile is not None else None

    def missing(self, questions: Sequence[Question]) -> list[tuple[Question, list[DecisionRequest]]]:
        """The distinct questions whose prior is not cached yet, each with its content-free requests."""
        if self.method == "none":
            return []
        todo = dict.fromkeys(
            q
            for q in questions
            if len(q.options) > 1 and self._fitted(q) is None and self.priors.get(self.method, q) is None
        )
        return [(q, prior_requests(q, self.method)) for q in todo]

    def learn(self, q: Question, log_likelihoods: Sequence[Sequence[float]]) -> None:
        self.priors.put(self.method, q, prior(log_likelihoods))

    def probabilities(self, q: Question, log_likelihoods: Sequence[float], hidden: np.ndarray | None) -> np.ndarray:
        fitted = self._fitted(q)
        if fitted is not None and len(q.options) > 1:
            return fitted.probabilities(log_likelihoods, hidden)
        found = self.priors.get(self.method, q) if self.method != "none" else None
        return calibrated(log_likelihoods, found, BY_NAME[self.method].adjust)
