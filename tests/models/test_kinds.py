"""Question kinds live in one place: a new kind is one class, and both protocols serve it end to end."""

from __future__ import annotations

import pytest
from fake_decider import FakeDecider

from decide import kinds
from decide.core import Decider
from decide.errors import InvalidRequest
from decide.kinds import Choice, Predicate, Score
from decide.prompts import question_block
from decide.request import Option, Question
from decide.server import create_app
from decide.server.config import ServerConfig
from decide.wire import openai, systemone

TEXT = "The parcel arrived late and the box was crushed, but support refunded me within an hour."
MOODS = ("negative", "mixed", "positive")


@pytest.fixture
def sentiment():
    """A toy kind: a choice among moods, introduced by its own header, named "sentiment" on both wires."""

    @kinds.register
    class Sentiment(Choice):
        name = "sentiment"
        wire = {"openai": "sentiment", "systemone": "sentiment"}
        header = "Allowed sentiments:"

    yield Sentiment
    kinds.unregister("sentiment")


def test_the_builtin_kinds_and_their_wire_names():
    assert list(kinds.KINDS) == ["predicate", "choice", "score"]
    assert {t: k.name for t, k in kinds.on_wire("systemone").items()} == {
        "noul": "predicate",
        "choice": "choice",
        "score": "score",
    }
    assert list(kinds.on_wire("openai")) == ["predicate", "choice", "score"]


def test_a_kind_inherits_its_base_form(sentiment):
    assert kinds.by_form(openai.FORMS, kinds.kind("sentiment")) is openai.FORMS[Choice]
    assert kinds.by_form(systemone.FORMS, kinds.kind("score")) is systemone.FORMS[Score]
    assert kinds.by_form(openai.FORMS, kinds.kind("predicate")) is openai.FORMS[Predicate]


def test_a_new_kind_has_its_own_header_and_the_rules_of_its_base(sentiment):
    q = Question("sentiment", "How does the writer feel?", tuple(Option(m) for m in MOODS))
    assert "Allowed sentiments:\n" in question_block(q)
    assert question_block(q).replace("Allowed sentiments:", "Allowed answers:") == question_block(
        Question.choice("How does the writer feel?", MOODS)
    )
    with pytest.raises(InvalidRequest, match="duplicate choice value"):
        Question("sentiment", "?", (Option("a"), Option("a")))


def test_an_unregistered_kind_is_refused():
    with pytest.raises(InvalidRequest, match="unknown question kind 'sentiment'"):
        Question("sentiment", "?", (Option("a"),))


def test_a_toy_kind_is_answered_end_to_end_over_both_protocols(sentiment, tiny_model):
    decider = Decider(tiny_model)
    app = create_app(ServerConfig(tune_malloc=False), decider=decider)
    client = app.test_client()
    want = decider.decide(TEXT, [Question("sentiment", "How does the writer feel?", tuple(Option(m) for m in MOODS))])
    p = list(want.answers[0].probabilities)

    choices = [{"value": m} for m in MOODS]
    question = {"type": "sentiment", "name": "mood", "instructions": "How does the writer feel?", "choices": choices}
    got = client.post("/v1/decisions", json={"model": "gpt-6-luna", "input": TEXT, "questions": [question]})
    assert got.status_code == 200, got.json
    [answer] = got.json["answers"]
    assert answer["type"] == "sentiment" and answer["name"] == "mood"
    assert [x["probability"] for x in answer["probabilities"]] == pytest.approx(p, abs=1e-5)
    assert answer["choice"] == MOODS[p.index(max(p))]

    criteria = dict.fromkeys(MOODS)
    question = {"type": "sentiment", "instructions": "How does the writer feel?", "criteria": criteria}
    got = client.post("/v1/systemone", json={"model": "jev-latest", "state": TEXT, "questions": {"mood": question}})
    assert got.status_code == 200, got.json
    answer = got.json["answers"]["mood"]
    assert answer["type"] == "sentiment"
    assert list(answer["probabilities"].values()) == pytest.approx(p, abs=1e-5)


def test_the_wire_enums_name_a_new_kind(sentiment):
    bad = {"model": "m", "input": "x", "questions": [{"type": "rank", "instructions": "?"}]}
    with pytest.raises(InvalidRequest, match="'predicate', 'choice', 'score', 'sentiment', got 'rank'"):
        openai.parse(bad)
    with pytest.raises(systemone.ValidationFailed, match="'noul', 'choice', 'score', 'sentiment', 'box'"):
        systemone.parse({"model": "m", "state": "x", "questions": {"q": {"type": "rank"}}})


def test_the_openapi_document_describes_a_new_kind(sentiment):
    doc = create_app(ServerConfig(tune_malloc=False), decider=FakeDecider()).test_client().get("/openapi.json").json
    schemas = doc["components"]["schemas"]
    openai_types = [q["properties"]["type"]["const"] for q in schemas["Question"]["anyOf"]]
    assert openai_types == ["predicate", "choice", "score", "sentiment"]
    sentiment_question = schemas["Question"]["anyOf"][3]
    assert sentiment_question["required"] == ["type", "instructions", "choices"]
    systemone = schemas["SystemOneRequest"]["properties"]["questions"]["additionalProperties"]["anyOf"]
    assert [q["properties"]["type"]["const"] for q in systemone] == ["noul", "choice", "score", "sentiment"]
