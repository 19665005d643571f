"""The engine on the real core: a cross-request batch answers exactly as each request alone."""

from __future__ import annotations

import time

import numpy as np
import pytest

from decide.core import Decider
from decide.request import DecisionRequest, Question
from decide.server.engine import Engine, EngineOptions


def deadline(seconds: float = 1e9) -> float:
    return time.monotonic() + seconds


@pytest.fixture(scope="module")
def tiny_decider(tiny_model) -> Decider:
    return Decider(tiny_model)


def varied_requests() -> list[DecisionRequest]:
    states = ["I was charged twice for March.", "The app crashes when I log in.", "Do you sell a team plan?"]
    out = []
    for i, state in enumerate(states * 2):
        questions = [
            Question.predicate("Is this a refund request?"),
            Question.choice("Which team?", ["billing", "technical", "sales"][: 2 + i % 2]),
            Question.score("How angry?", ["calm", "annoyed", "angry"]),
        ][: 1 + i % 3]
        out.append(DecisionRequest.of(f"{state} (ticket {i})", questions))
    return out


def test_batched_answers_equal_solo_answers_on_the_tiny_model(tiny_decider: Decider) -> None:
    requests = varied_requests()
    solo = [tiny_decider.decide(r) for r in requests]
    engine = Engine(EngineOptions(batch_max_tokens=1 << 20, batch_max_questions=400), decider=tiny_decider)
    jobs = [engine.submit(engine.prepare(r), deadline()) for r in requests]
    engine.start()  # everything is queued first, so it all goes into one decide_batch call
    batched = [engine.wait(j) for j in jobs]
    engine.stop()
    assert {j.batch_size for j in jobs} == {len(requests)}
    for a, b in zip(solo, batched):
        assert [x.question for x in a.answers] == [x.question for x in b.answers]
        for x, y in zip(a.answers, b.answers):
            np.testing.assert_allclose(x.probabilities, y.probabilities, rtol=0, atol=1e-6)
