"""The one internal request model that both wire protocols parse into.

Plain frozen dataclasses, no I/O, no protocol knowledge. A question's name or id is
not part of it: names live in the wire layer and never reach the prompt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import kinds
from .errors import InvalidRequest, UnsupportedInput
from .kinds import QuestionKind
from .limits import MAX_OPTIONS

DEFAULT_FALSE = "The answer is no; the condition is false."
DEFAULT_TRUE = "The answer is yes; the condition is true."


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Image:
    """Raw image bytes; `media_type` is detected from the bytes by the wire layer."""

    data: bytes = field(repr=False)
    media_type: str = "image/png"


Part = Text | Image


@dataclass(frozen=True)
class Option:
    """One allowed answer: the JSON value the model must produce, and how it is described.

    For score levels `value` is the level's label (a string); it is scored as a JSON string.
    """

    value: str | bool
    description: str | None = None


@dataclass(frozen=True)
class Question:
    kind: str  # a name in kinds.KINDS
    instructions: str
    options: tuple[Option, ...]
    # Parts shown after the question block (question images, each after its reference text).
    attachments: tuple[Part, ...] = ()

    def __post_init__(self) -> None:
        _validate_question(self, ())

    @property
    def spec(self) -> QuestionKind:
        """The kind's rules: its prompt header, accepted values and answer statistics."""
        return kinds.kind(self.kind)

    @classmethod
    def predicate(
        cls,
        instructions: str,
        true: str | None = DEFAULT_TRUE,
        false: str | None = DEFAULT_FALSE,
        attachments: Sequence[Part] = (),
    ) -> Question:
        options = (Option(False, false), Option(True, true))
        return cls("predicate", instructions, options, tuple(attachments))

    @classmethod
    def choice(
        cls,
        instructions: str,
        options: Iterable[str | bool | Option | tuple[str | bool, str | None]],
        attachments: Sequence[Part] = (),
    ) -> Question:
        return cls("choice", instructions, tuple(_as_option(o) for o in options), tuple(attachments))

    @classmethod
    def score(
        cls,
        instructions: str,
        levels: Iterable[str | Option | tuple[str, str | None]],
        attachments: Sequence[Part] = (),
    ) -> Question:
        return cls("score", instructions, tuple(_as_option(o) for o in levels), tuple(attachments))


@dataclass(frozen=True)
class DecisionRequest:
    """What is decided: one input (text and images, in order) and the questions about it."""

    input: tuple[Part, ...]
    questions: tuple[Question, ...]

    def __post_init__(self) -> None:
        if not self.questions:
            raise InvalidRequest("a request needs at least one question", ("questions",), "array_below_min_length")
        for i, part in enumerate(self.input):
            _validate_part(part, ("input", i))

    @classmethod
    def of(cls, input: str | Sequence[Part], questions: Iterable[Question]) -> DecisionRequest:
        parts = (Text(input),) if isinstance(input, str) else tuple(input)
        return cls(parts, tuple(questions))

    @property
    def images(self) -> list[tuple[tuple, Image]]:
        """Every image with its path, input first, then per question."""
        found = [(("input", i), p) for i, p in enumerate(self.input) if isinstance(p, Image)]
        for q, question in enumerate(self.questions):
            found += [
                (("questions", q, "attachments", i), p)
                for i, p in enumerate(question.attachments)
                if isinstance(p, Image)
            ]
        return found


def refuse_images(images: Sequence[tuple[tuple, Image]], reader: str) -> None:
    """Images for a reader of text only (`reader`: "model X"): the first one's path names the mistake."""
    if images:
        path, _ = images[0]
        raise UnsupportedInput(
            f"{reader} reads text only and cannot take images; remove them or serve a vision model", path
        )


def _as_option(o: str | bool | Option | tuple) -> Option:
    if isinstance(o, Option):
        return o
    if isinstance(o, tuple):
        return Option(*o)
    return Option(o)


_TYPE_NAMES = {str: "a string", bool: "a boolean"}


def _validate_part(part: object, path: tuple) -> None:
    if isinstance(part, Text):
        if not isinstance(part.text, str):
            raise InvalidRequest("text must be a string", path, "invalid_type")
    elif isinstance(part, Image):
        if not isinstance(part.data, bytes) or not part.data:
            raise InvalidRequest("an image needs non-empty bytes", path, "invalid_image")
    else:
        raise InvalidRequest(f"unknown content part {type(part).__name__}", path, "invalid_type")


def _validate_question(q: Question, path: tuple) -> None:
    if q.kind not in kinds.KINDS:
        raise InvalidRequest(f"unknown question kind {q.kind!r}; expected one of {tuple(kinds.KINDS)}", (*path, "kind"))
    if not isinstance(q.instructions, str):
        raise InvalidRequest("instructions must be a string", (*path, "instructions"), "invalid_type")
    spec = q.spec
    spec.check([o.value for o in q.options], path)
    n = len(q.options)
    if n < 1:
        raise InvalidRequest(
            f"a {q.kind} question needs at least one option", (*path, "options"), "array_below_min_length"
        )
    if n > MAX_OPTIONS:
        raise InvalidRequest(
            f"a {q.kind} question takes at most {MAX_OPTIONS} options, got {n}",
            (*path, "options"),
            "array_above_max_length",
        )
    seen: set[tuple[type, str | bool]] = set()
    for i, o in enumerate(q.options):
        where = (*path, "options", i)
        if isinstance(o.value, float) and not math.isfinite(o.value):
            raise InvalidRequest("option values must be finite", (*where, "value"), "invalid_value")
        if not isinstance(o.value, spec.value_types):
            allowed = " or ".join(_TYPE_NAMES[t] for t in spec.value_types)
            raise InvalidRequest(
                f"an option value must be {allowed}, got {o.value!r}", (*where, "value"), "invalid_type"
            )
        if o.description is not None and not isinstance(o.description, str):
            raise InvalidRequest("a description must be a string or None", (*where, "description"), "invalid_type")
        key = (type(o.value), o.value)
        if spec.distinct and key in seen:
            raise InvalidRequest(f"duplicate choice value {o.value!r}", (*where, "value"), "invalid_value")
        seen.add(key)
    for i, part in enumerate(q.attachments):
        _validate_part(part, (*path, "attachments", i))
