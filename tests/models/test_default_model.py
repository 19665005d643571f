"""The embedded default model (Qwen2.5-Coder-1.5B) on obvious questions, end to end, with the specified prompt.

What the method really does: clear choices come out right, scores order sensibly, and yes/no
questions lean towards `true`: an obvious "no" still gets p(true) > 0.5, though less than an obvious "yes".
"""

from __future__ import annotations

import pytest

from decide.core import Decider, DeciderOptions
from decide.request import Option, Question
from decide.wire import systemone

pytestmark = pytest.mark.slow

TEAMS = [
    Option("billing", "payments, invoices, refunds and subscriptions"),
    Option("technical", "bugs, errors, outages and pages that do not load"),
    Option("account", "login, passwords, profile and account settings"),
    Option("sales", "pricing questions, upgrades and new purchases"),
]
TICKETS = {
    "billing": "I was charged twice for my subscription this month. Please refund the duplicate charge.",
    "technical": "The app crashes with a 500 error every time I open the settings page.",
    "account": "I forgot my password and the reset email never arrives, so I cannot log in.",
}
FURIOUS = (
    "This is the THIRD time you have charged me twice. I am absolutely furious. "
    "Fix it NOW or I will sue you and tell everyone how useless you are!!!"
)
CALM = "Hi, just a quick question when you have a moment: when is my next invoice due? Thank you, have a nice day."
# (question, input where the answer is obviously yes, input where it is obviously no)
YES_NO = {
    "refund": (
        "Is the customer asking for a refund?",
        TICKETS["billing"],
        "Thank you so much for the quick help yesterday, everything works perfectly now!",
    ),
    "capital": ("Is this statement true?", "Paris is the capital of France.", "Berlin is the capital of France."),
    "sun": (
        "Is this statement true?",
        "Water boils at 100 degrees Celsius at sea level.",
        "The sun orbits the Earth once a day.",
    ),
    "sum": ("Is this equation correct?", "2 + 2 = 4", "2 + 2 = 5"),
}


@pytest.fixture(scope="module")
def decider(qwen) -> Decider:
    return Decider(qwen)  # the default options: the trie scorer


@pytest.fixture(scope="module")
def p_true(decider) -> dict[tuple[str, bool], float]:
    """P(true) for each YES_NO case on its obvious-yes and obvious-no input."""
    out = {}
    for name, (question, yes, no) in YES_NO.items():
        for obvious, text in ((True, yes), (False, no)):
            out[name, obvious] = decider.decide(text, [Question.predicate(question)]).answers[0].probability
    return out


def test_obvious_tickets_go_to_their_team(decider):
    for team, ticket in TICKETS.items():
        answer = decider.decide(ticket, [Question.choice("Which team should handle this ticket?", TEAMS)]).answers[0]
        assert answer.best.value == team, (ticket, answer.probabilities)
        assert answer.probability > 0.5 and answer.confidence > 0.3


def test_a_furious_message_scores_high_end_to_end(decider):
    def anger(state: str) -> dict:
        body = {
            "model": "jev-latest",
            "state": state,
            "questions": {
                "anger": {
                    "type": "score",
                    "instructions": "How angry is the customer?",
                    "criteria": ["calm", "annoyed", "angry", "furious"],
                }
            },
        }
        return systemone.decide(decider, body)["answers"]["anger"]

    furious, calm = anger(FURIOUS), anger(CALM)
    assert furious["score"] > 2, furious  # on 0 (calm) .. 3 (furious)
    assert max(furious["probabilities"], key=furious["probabilities"].get) in ("2", "3")
    assert furious["score"] > calm["score"] + 1, (furious, calm)


def test_yes_no_ranks_the_obvious_yes_above_the_obvious_no(p_true):
    for name in YES_NO:
        assert p_true[name, True] > p_true[name, False], (name, p_true[name, True], p_true[name, False])


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="with the specified prompt the 1.5B model leans towards true on yes/no questions; "
    "remove this marker when a measured calibration or prompt option fixes it",
)
def test_an_obvious_no_gets_p_true_below_one_half(p_true):
    assert all(p_true[name, False] < 0.5 for name in YES_NO), p_true


def test_with_written_examples_the_obvious_answers_stay_right(qwen):
    """`examples`: the model writes and checks two examples per answer, then answers after them (minutes in float32,
    so only two questions)."""
    decider = Decider(qwen, DeciderOptions(calibration="examples"))
    team = Question.choice("Which team should handle this ticket?", TEAMS)
    for expected, ticket in TICKETS.items():
        assert decider.decide(ticket, [team]).answers[0].best.value == expected
    question, yes, no = YES_NO["sum"]
    q = Question.predicate(question)
    assert decider.decide(yes, [q]).answers[0].probability > 0.5 > decider.decide(no, [q]).answers[0].probability
    shown = decider.calibrator.demonstrations(q)
    assert all(d.input for d in shown) and (not shown or {d.option for d in shown} == {0, 1})
