"""A fake decider for server tests: deterministic, name- and order-blind, and it records its calls.

Each question's distribution is a softmax of per-option scores drawn from a hash of what the
model would see (the input parts, the question and the option), never of names or positions.
"""

from __future__ import annotations

import hashlib
import threading

from decide.answers import Answer, Decision, Usage, softmax
from decide.errors import ContextLengthExceeded, UnsupportedInput
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


class FakeDecider:
    """Stands in for decide.core.Decider at the server seam."""

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
        self._lock = threading.Lock()

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
            tokens += len(text) // 4 + 2 * len(q.options)
        return Decision(self.model_id, tuple(answers), Usage(input_tokens=tokens, computed_tokens=tokens))
