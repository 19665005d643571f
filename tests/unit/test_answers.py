"""Contract §3: confidence and score, checked on the contract's worked examples."""

import pytest

from decide.answers import Answer, choice_confidence, expected_score, mode, score_confidence, softmax, uniform_spread
from decide.request import Question


@pytest.mark.parametrize("n,u", [(2, 0.5), (3, 2 / 3), (4, 1.0), (5, 1.2), (10, 2.5)])
def test_uniform_spread_closed_forms(n, u):
    assert uniform_spread(n) == pytest.approx(u, abs=1e-12)


@pytest.mark.parametrize(
    "p,conf",
    [([0.7, 0.2, 0.1], 0.55), ([0.3, 0.7], 0.4), ([1 / 3] * 3, 0.0), ([1.0], 1.0), ([0.0, 1.0, 0.0], 1.0)],
)
def test_choice_confidence(p, conf):
    assert choice_confidence(p) == pytest.approx(conf, abs=1e-9)


@pytest.mark.parametrize(
    "p,score,conf",
    [
        ([0.1, 0.1, 0.8], 1.7, 0.55),
        ([0.1, 0.2, 0.6, 0.1], 1.7, 0.5),
        ([0.3, 0.7], 0.7, 0.4),
        ([0.4, 0.4, 0.2], 0.8, 0.0),
        ([0.21, 0.19, 0.2, 0.2, 0.2], 1.99, 0.0),
        ([1.0], 0.0, 1.0),
    ],
)
def test_score_and_confidence(p, score, conf):
    assert expected_score(p) == pytest.approx(score, abs=1e-9)
    assert score_confidence(p) == pytest.approx(conf, abs=1e-9)


def test_ties_take_the_first_option():
    assert mode([0.4, 0.4, 0.2]) == 0
    q = Question.choice("which?", ["a", "b", "c"])
    assert Answer(q, (0.4, 0.4, 0.2), (0.0, 0.0, -0.7)).best.value == "a"


def test_softmax_is_stable_and_normalized():
    p = softmax([-1000.0, -1001.0, -2000.0])
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert p[0] > p[1] > p[2] >= 0


def test_predicate_answer_is_p_true_without_confidence():
    q = Question.predicate("Is it?")
    a = Answer(q, (0.25, 0.75), (-1.0, 0.1))
    assert a.probability == 0.75 and a.confidence is None and a.score is None and a.best.value is True
