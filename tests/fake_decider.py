"""A fake decider for server tests: deterministic, name- and order-blind, and it records its calls.

Each question's distribution is a softmax of per-option scores drawn from a hash of what the
model would see (the input parts, the question and the option), never of names or positions.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from decide.answers import Answer, Decision, Usage, softmax
from decide.errors import ContextLengthExceeded, DecideError, UnsupportedInput
from decide.request import DecisionRequest, Image, Part, Question


def _digest(parts: tuple[Part, ...]) -> str:
    return "|".join(
        f"img:{hashlib.sha256(p.data).hexdigest()}:{p.media_type}" if isinstance(p, Image) else f"txt:{p.text}"
        for p in parts
    )


def seen_text(request: DecisionRequest, q: Question) -> str:
    """What a model would be shown for `q` (a stable stand-in for the real prompt)."""
    options = "\n".join(f"{o.value!r}={o.description!r}" for o in q.options)
    return f"{_digest(request.input)}\n{q.kind}\n{q.instructions}\n{options}\n{_digest(q.attachments)}"


def option_score(text: str, index: int) -> float:
    h = hashlib.sha256(f"{text}#{index}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 * 8.0 - 4.0


@dataclass(frozen=True)
class Prepared:
    input_tokens: int
    request: DecisionRequest


class FakeDecider:
    """Stands in for decide.core.Decider at the server seam.

    `gate` (anything with `wait()`, e.g. an Event), when set up, holds every decide_batch call
    until it opens; `entered` is set when a call starts; `batches` records the size of every
    decide_batch call and `prepared` every prepare().
    """

    def __init__(
        self, model_id: str = "fake/decider-1", supports_images: bool = False, context_chars: int | None = None
    ) -> None:
        self.model_id = model_id
        self.supports_images = supports_images
        self.context_chars = context_chars
        self.info = {
            "model": model_id,
            "device": "cpu",
            "dtype": "float32",
            "blas": "none",
            "context_length": context_chars or 8192,
        }
        self.calls: list[DecisionRequest] = []
        self.fail_with: BaseException | None = None  # raised by the next decide(), once
        self.bad_probabilities: list[float] | None = None  # returned for every question when set
        self.gate: Any = None
        self.batches: list[int] = []
        self.prepared: list[DecisionRequest] = []
        self.entered = threading.Event()  # set when a decide_batch call starts
        self._lock = threading.Lock()

    def prepare(self, request: DecisionRequest) -> Prepared:
        """What the core does before scoring: the image and context checks, and the token count."""
        with self._lock:
            self.prepared.append(request)
        if request.images and not self.supports_images:
            raise UnsupportedInput("the fake model reads text only", request.images[0][0])
        for i, q in enumerate(request.questions):
            if self.context_chars is not None and len(seen_text(request, q)) > self.context_chars:
                raise ContextLengthExceeded(f"question {i} is too long for the fake model", question_index=i)
        return Prepared(sum(_tokens(seen_text(request, q), q) for q in request.questions), request)

    def decide_batch(self, requests: Sequence[DecisionRequest | Prepared]) -> list[Decision | DecideError]:
        """Like the core's: takes what prepare() returned, or plain requests."""
        requests = [r.request if isinstance(r, Prepared) else r for r in requests]
        self.entered.set()
        if self.gate is not None:
            self.gate.wait()
        with self._lock:
            self.batches.append(len(requests))
        out: list[Decision | DecideError] = []
        for r in requests:
            try:
                out.append(self.decide(r))
            except DecideError as e:
                out.append(e)
        return out

    def decide(self, request: DecisionRequest) -> Decision:
        with self._lock:
            self.calls.append(request)
            failure, self.fail_with = self.fail_with, None
        if failure is not None:
            raise failure
        if request.images and not self.supports_images:
            raise UnsupportedInput("the fake model reads text only", request.images[0][0])
        answers = []
        tokens = 0
        for i, q in enumerate(request.questions):
            text = seen_text(request, q)
            if self.context_chars is not None and len(text) > self.context_chars:
                raise ContextLengthExceeded(f"question {i} is {len(text)} characters long", question_index=i)
            scores = [option_score(text, k) for k in range(len(q.options))]
            p = tuple(float(x) for x in softmax(scores))
            if self.bad_probabilities is not None:
                p = tuple(self.bad_probabilities)
            answers.append(Answer(q, p, tuple(scores)))
            tokens += _tokens(text, q)
        return Decision(self.model_id, tuple(answers), Usage(input_tokens=tokens, computed_tokens=tokens))


def _tokens(text: str, q: Question) -> int:
    return len(text) // 4 + 2 * len(q.options)
