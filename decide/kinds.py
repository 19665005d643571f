"""Question kinds: what each accepts, how its options are introduced, what its answer reports.

A kind is a class registered under its name (`Question.kind`). Each protocol names it through
`wire`; the wire modules read and render its options by the form it inherits (Predicate, Choice
or Score; see `by_form`). Adding a kind is one subclass, registered:

    @register
    class Likert(Score):
        name = "likert"
        wire = {"openai": "likert", "systemone": "likert"}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, TypeVar

from .answers import choice_confidence, expected_score, score_confidence
from .errors import InvalidRequest

T = TypeVar("T")
K = TypeVar("K", bound="type[QuestionKind]")


class QuestionKind:
    """A kind's rules. Statistics take the distribution over the options, in option order."""

    name: ClassVar[str]
    wire: ClassVar[Mapping[str, str]]  # protocol → the kind's type string there
    header: ClassVar[str] = "Allowed answers:"
    value_types: ClassVar[tuple[type, ...]] = (str, bool)
    distinct: ClassVar[bool] = False  # duplicate option values are refused

    def check(self, values: Sequence[object], path: tuple) -> None:
        """Refuse option values this kind cannot take (beyond their types)."""

    def probability(self, p: Sequence[float]) -> float:
        return max(p)

    def confidence(self, p: Sequence[float]) -> float | None:
        return None

    def score(self, p: Sequence[float]) -> float | None:
        return None


class Predicate(QuestionKind):
    """Yes or no: the options are exactly [false, true]; the answer is P(true)."""

    name = "predicate"
    wire = {"openai": "predicate", "systemone": "noul"}

    def check(self, values: Sequence[object], path: tuple) -> None:
        if list(values) != [False, True]:
            raise InvalidRequest("predicate options must be [false, true]", (*path, "options"))

    def probability(self, p: Sequence[float]) -> float:
        return p[1]


class Choice(QuestionKind):
    """One of distinct values (strings or booleans)."""

    name = "choice"
    wire = {"openai": "choice", "systemone": "choice"}
    distinct = True

    def confidence(self, p: Sequence[float]) -> float | None:
        return choice_confidence(p)


class Score(QuestionKind):
    """A level on an ordered scale of labels; the score is the expected level index."""

    name = "score"
    wire = {"openai": "score", "systemone": "score"}
    header = "Allowed answers (ordered from lowest to highest):"
    value_types = (str,)

    def confidence(self, p: Sequence[float]) -> float | None:
        return score_confidence(p)

    def score(self, p: Sequence[float]) -> float | None:
        return expected_score(p)


KINDS: dict[str, QuestionKind] = {}


def register(cls: K) -> K:
    """Make a kind known to the request model, the prompt and both protocols (in this order)."""
    KINDS[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    del KINDS[name]


for _builtin in (Predicate, Choice, Score):
    register(_builtin)


def kind(name: str) -> QuestionKind:
    return KINDS[name]


def on_wire(protocol: str) -> dict[str, QuestionKind]:
    """The kinds a protocol knows, by their type string there, in registration order."""
    return {k.wire[protocol]: k for k in KINDS.values() if protocol in k.wire}


def by_form(table: Mapping[type, T], kind: QuestionKind) -> T:
    """The entry of the nearest class of `kind` in `table`: a kind inherits its base's wire form."""
    return next(table[c] for c in type(kind).__mro__ if c in table)
