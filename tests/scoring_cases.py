"""Hypothesis strategies for random decision requests, and comparisons between scorers."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from decide.answers import Decision
from decide.request import DecisionRequest, Option, Question

WORDS = ["refund", "charged", "twice", "card", "login", "fails", "price", "angry", "thanks", "café", "🙂", "42", "the"]
# Stems that share token prefixes, and options that are prefixes of other options.
OPTION_TEXTS = [
    "a",
    "ab",
    "abc",
    "b",
    "ba",
    "billing",
    "bill",
    "true",
    "false",
    "x y",
    "é",
    "",
    "Queue 001",
    "Queue 002",
]

# A three-question ticket, one of each kind (the reduced-precision tests compare it across precisions).
TICKET = DecisionRequest.of(
    "I was charged twice for my subscription, please give me my money back.",
    [
        Question.predicate("Is this a refund request?"),
        Question.choice("Which team should take it?", ["billing", "technical", "sales", "legal"]),
        Question.score("How angry is the customer?", ["calm", "annoyed", "angry"]),
    ],
)

texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)
descriptions = st.one_of(st.none(), texts)


@st.composite
def choice_options(draw, max_size: int = 8) -> list[Option]:
    values = draw(
        st.lists(
            st.one_of(st.sampled_from(OPTION_TEXTS), st.booleans()),
            min_size=1,
            max_size=max_size,
            unique_by=lambda v: (type(v), v),
        )
    )
    return [Option(v, draw(descriptions)) for v in values]


@st.composite
def questions(draw, max_options: int = 8) -> Question:
    kind = draw(st.sampled_from(["predicate", "choice", "score"]))
    instructions = draw(texts)
    if kind == "predicate":
        return Question.predicate(instructions)
    if kind == "choice":
        return Question.choice(instructions, draw(choice_options(max_options)))
    levels = draw(st.lists(st.sampled_from(OPTION_TEXTS), min_size=1, max_size=max_options))
    return Question.score(instructions, levels)


@st.composite
def requests(draw, max_questions: int = 6, max_options: int = 8) -> DecisionRequest:
    qs = draw(st.lists(questions(max_options), min_size=1, max_size=max_questions))
    return DecisionRequest.of(draw(texts), qs)


def assert_same_answers(a: Decision, b: Decision, prob_tol: float, ll_tol: float | None = None) -> None:
    """Same probabilities; and, when ll_tol is given, the same log-likelihood differences within each question."""
    assert len(a.answers) == len(b.answers)
    for x, y in zip(a.answers, b.answers):
        np.testing.assert_allclose(x.probabilities, y.probabilities, atol=prob_tol, rtol=0)
        if ll_tol is not None and len(x.log_likelihoods) > 1:
            dx = np.subtract(x.log_likelihoods, x.log_likelihoods[0])
            dy = np.subtract(y.log_likelihoods, y.log_likelihoods[0])
            np.testing.assert_allclose(dx, dy, atol=ll_tol, rtol=1e-5)


def trie_minimum(tokenized) -> int:
    """Tokens an exact scorer must compute: every distinct proper prefix of every prompt + candidate."""
    seen = set()
    for q in tokenized:
        for c in q.candidates:
            s = (*q.prompt, *c)
            seen.update(s[:t] for t in range(1, len(s)))
    return len(seen)
