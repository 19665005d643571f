"""The official `typesafe-sdk` (0.7.5, zstd on) against `gunicorn wsgi:app` serving the tiny test model."""

from __future__ import annotations

import httpx2
import pytest
from server_process import ServerProcess
from tiny_model import write_tiny_gguf
from typesafe_sdk import (
    Box,
    Choice,
    Image,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeAuthenticationError,
    TypeSafeBadRequestError,
    TypeSafeClient,
    TypeSafeNotFoundError,
    TypeSafePermissionDeniedError,
    TypeSafeUnprocessableEntityError,
)
from wire_samples import JPEG, png

from decide.answers import choice_confidence, score_confidence

KEY = "typesafe-test-key"
TICKET = (
    "Hi, I was charged twice for my March invoice (order #4471) and the refund I was promised last week still "
    "hasn't arrived. I've emailed three times. Please fix this today or I will dispute the charge with my bank. "
) * 4


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("typesafe-sdk")
    model = write_tiny_gguf(root / "tiny.gguf")
    env = {"DECIDE_MODEL": str(model), "DECIDE_CACHE_DIR": str(root / "cache"), "DECIDE_API_KEY": KEY}
    with ServerProcess.start("wsgi:app", env=env) as process:
        yield process


class Recorder:
    """An httpx2 client that remembers the headers of what it sent (and can drop Authorization)."""

    def __init__(self, drop_auth: bool = False) -> None:
        self.sent: list[httpx2.Headers] = []
        self.drop_auth = drop_auth
        self.http = httpx2.Client(timeout=60, event_hooks={"request": [self.hook]})

    def hook(self, request: httpx2.Request) -> None:
        if self.drop_auth:
            del request.headers["authorization"]
        self.sent.append(request.headers)


def sdk(server, key: str = KEY, recorder: Recorder | None = None, base: str | None = None) -> TypeSafeClient:
    recorder = recorder or Recorder()
    return TypeSafeClient(
        api_key=key, base_url=base or server.url, retry=RetryPolicy(max_retries=0), http_client=recorder.http
    )


QUESTIONS = {
    "refund": Noul(instructions="Is the customer asking for money back?"),
    "threat": Noul(criteria={"true": "They threaten a chargeback", "false": None}),
    "structured": Noul(instructions={"task": "Refund?", "include": ["chargebacks"]}, criteria={"true": ["refund me"]}),
    "team": Choice(
        instructions="Which team should handle this ticket?",
        criteria={"Billing": "Payments, invoices, refunds", "Technical": None, "환불 요청": {"owns": ["refunds"]}},
    ),
    "질문 🎯": Score(instructions="How frustrated is the customer?", criteria=["Calm", "", {"label": "Very angry"}]),
    "q.2 with space": {"type": "score", "criteria": ["Low", "High"]},
}


def test_every_question_type_over_zstd(server) -> None:
    recorder = Recorder()
    with sdk(server, recorder=recorder) as client:
        r = client.system_one(state=TICKET, questions=QUESTIONS, extra_body={"x_trace_id": "t-1", "seed": 7})
    assert recorder.sent[-1]["content-encoding"] == "zstd"
    assert list(r.answers) == list(QUESTIONS)
    assert r.model == "tiny" and type(r.usage.input_tokens) is int and r.usage.output_tokens == 0
    assert r.request_id.startswith("req_")
    for name in ("refund", "threat", "structured"):
        assert 0.0 <= r.nouls[name].noul <= 1.0
    team = r.choices["team"]
    assert list(team.probabilities) == ["Billing", "Technical", "환불 요청"]
    assert team.choice == max(team.probabilities, key=team.probabilities.get)
    assert abs(team.confidence - choice_confidence(list(team.probabilities.values()))) < 1e-9
    anger = r.scores["질문 🎯"]
    assert anger.legend == {0: "Calm", 1: "", 2: {"label": "Very angry"}}
    p = [anger.probabilities[i] for i in range(3)]
    assert abs(sum(p) - 1) < 1e-6 and abs(anger.score - (p[1] + 2 * p[2])) < 1e-9
    assert abs(anger.confidence - score_confidence(p)) < 1e-9
    assert set(r.scores["q.2 with space"].legend) == {0, 1}


def test_small_bodies_are_not_compressed(server) -> None:
    recorder = Recorder()
    with sdk(server, recorder=recorder) as client:
        r = client.system_one(state="Refund me.", questions={"r": Noul(instructions="Refund?")}, model="any-name")
    assert "content-encoding" not in recorder.sent[-1]
    assert r.model == "tiny"


def test_models_list(server) -> None:
    with sdk(server) as client:
        names = [m.name for m in client.models.list().models]
    assert names[:2] == ["tiny", "jev-latest"]


def test_images_are_rejected_by_the_text_only_model(server) -> None:
    photo, other = Image(png()), Image(JPEG)
    recorder = Recorder()
    with sdk(server, recorder=recorder) as client, pytest.raises(TypeSafeBadRequestError) as caught:
        # The SDK sends images it can see as objects; a bare reference in text only names one of those.
        state = {"ticket": TICKET, "photo": photo, "label": other}
        client.system_one(state=state, questions={"ok": Noul(instructions=f"Is {other} damaged?")})
    assert recorder.sent[-1]["content-type"].startswith("multipart/form-data")
    assert recorder.sent[-1]["content-encoding"] == "zstd"
    assert caught.value.status == 400 and caught.value.body["detail"]["error_type"] == "api_usage_error"
    assert caught.value.request_id.startswith("req_")


def test_error_classes(server) -> None:
    ask = {"state": "x", "questions": {"r": Noul(instructions="Refund?")}}
    with sdk(server) as client:
        with pytest.raises(TypeSafeUnprocessableEntityError) as caught:
            client.system_one(
                **ask,
                extra_body={"questions": {"r": {"type": "boolean"}, "s": {"type": "score", "criteria": {"0": "a"}}}},
            )
        assert [e["type"] for e in caught.value.body["detail"]] == ["union_tag_invalid", "list_type"]
        with pytest.raises(TypeSafeBadRequestError) as caught:
            client.system_one(state="x", questions={"where": Box(instructions="The dog")})
        assert caught.value.body["detail"]["error_type"] == "api_usage_error"
    with sdk(server, key="wrong-key") as client, pytest.raises(TypeSafeAuthenticationError) as caught:
        client.system_one(**ask)
    assert caught.value.body["detail"]["error_type"] == "authentication_error"
    with (
        sdk(server, recorder=Recorder(drop_auth=True)) as client,
        pytest.raises(TypeSafePermissionDeniedError) as caught,
    ):
        client.system_one(**ask)
    assert caught.value.status == 403
    with sdk(server, base=server.url + "/nowhere") as client, pytest.raises(TypeSafeNotFoundError) as caught:
        client.system_one(**ask)
    assert caught.value.body["detail"]["error_type"] == "not_found"


@pytest.fixture(scope="module")
def vision():
    with ServerProcess.start("fake_wsgi:app", env={"FAKE_IMAGES": "1", "DECIDE_API_KEY": ""}) as process:
        yield process


def test_multipart_images_reach_a_vision_model(vision) -> None:
    photo = Image(png())
    recorder = Recorder()
    with sdk(vision, recorder=recorder) as client:
        r = client.system_one(
            state=f"{TICKET} Photo: {photo}, see the label",
            assets={"label": Image(JPEG)},
            questions={"damaged": Noul(instructions=f"Is {photo} damaged?")},
        )
    assert recorder.sent[-1]["content-type"].startswith("multipart/form-data")
    assert 0.0 <= r.nouls["damaged"].noul <= 1.0
