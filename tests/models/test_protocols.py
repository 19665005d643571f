"""Protocols live in one place: a new protocol is one record, and the app routes, answers errors
and documents it without another change."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from decide.core import Decider
from decide.errors import InvalidRequest
from decide.request import DecisionRequest, Question
from decide.server import create_app
from decide.server.config import ServerConfig
from decide.wire import PROTOCOLS
from decide.wire.common import loads_object
from decide.wire.protocol import Protocol
from decide.wire.schema import json_content, obj

TEXT = "The parcel arrived late and the box was crushed."


@dataclass(frozen=True)
class Plain:
    request: DecisionRequest
    model: str = "plain"


def _parse(body, parts, limits) -> Plain:
    if not isinstance(body.get("ask"), str):
        raise InvalidRequest("'ask' must be a string", ("ask",))
    return Plain(DecisionRequest.of(str(body.get("text", "")), [Question.predicate(body["ask"])]))


@pytest.fixture
def plain():
    """A toy protocol: {"text", "ask"} in, {"yes": P(true)} out, errors as {"oops": message}."""
    protocol = Protocol(
        title="Plain yes/no",
        path="/v1/plain",
        operation_id="plain",
        summary="one yes/no question about a text",
        read=lambda raw, content_type: (loads_object(raw), None),
        parse=_parse,
        check_caps=lambda parsed, max_options, max_images: None,
        render=lambda decision, parsed: {"yes": decision.answers[0].probability},
        problem=lambda exc: None,
        error_body=lambda problem: {"oops": problem.message},
        schemas=lambda: {
            "PlainRequest": obj(["ask"], text={"type": "string"}, ask={"type": "string"}),
            "PlainResponse": obj(["yes"], yes={"type": "number"}),
            "PlainError": obj(["oops"], oops={"type": "string"}),
        },
        request_content=lambda: json_content("PlainRequest"),
        response="PlainResponse",
        error="PlainError",
        errors={"400": "no question"},
    )
    PROTOCOLS.append(protocol)
    yield protocol
    PROTOCOLS.remove(protocol)


def test_a_toy_protocol_is_served_documented_and_answers_errors_in_its_shape(plain, tiny_model):
    decider = Decider(tiny_model)
    client = create_app(ServerConfig(tune_malloc=False), decider=decider).test_client()
    want = decider.decide(TEXT, [Question.predicate("Is the customer unhappy?")]).answers[0].probability

    got = client.post("/v1/plain", json={"text": TEXT, "ask": "Is the customer unhappy?"})
    assert got.status_code == 200 and got.json["yes"] == pytest.approx(want, abs=1e-5)

    bad = client.post("/v1/plain", json={"text": TEXT})
    assert (bad.status_code, bad.json) == (400, {"oops": "'ask' must be a string"})
    assert client.post("/v1/plain", data=b"{").json == {
        "oops": "the body is not valid JSON: Expecting property name enclosed in double quotes (char 1)"
    }

    assert {"method": "POST", "path": "/v1/plain", "protocol": "Plain yes/no"} in client.get("/v1").json["data"]
    doc = client.get("/openapi.json").json
    assert doc["paths"]["/v1/plain"]["post"]["responses"]["400"]["description"] == "no question"
    assert "PlainRequest" in doc["components"]["schemas"]
    # elsewhere, every protocol's error keys are merged, the new one's too
    assert set(client.get("/v1/nowhere").json) == {"error", "detail", "oops"}
