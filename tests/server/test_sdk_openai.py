"""The official `openai` SDK (3.57) against `gunicorn wsgi:app` serving the tiny test model."""

from __future__ import annotations

import math

import openai as openai_sdk
import pytest
from openai.lib.decisions_tool_runner import DecisionsToolRunner, DecisionsToolRunnerError
from server_process import ServerProcess
from tiny_model import write_tiny_gguf
from wire_samples import PNG_URL

from decide.answers import choice_confidence, score_confidence

KEY = "sdk-test-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai-sdk")
    model = write_tiny_gguf(root / "tiny.gguf")
    env = {"DECIDE_MODEL": str(model), "DECIDE_CACHE_DIR": str(root / "cache"), "DECIDE_API_KEY": KEY}
    with ServerProcess.start("wsgi:app", env=env) as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    with openai_sdk.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60) as c:
        yield c


QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": "Is this a refund request?"},
    {
        "type": "choice",
        "name": "team",
        "instructions": "Which team?",
        "choices": [
            {"value": "billing", "description": "Payments"},
            {"value": "true"},
            {"value": True},
            {"value": False},
        ],
    },
    {
        "type": "score",
        "name": "anger",
        "instructions": [
            {"type": "input_text", "text": "How angry? "},
            {"type": "input_json", "data": {"scale": "0-2"}},
        ],
        "levels": [{"label": "Calm"}, {"label": "Annoyed", "description": "Short replies"}, {"label": "Angry"}],
    },
]


def check_answers(decision, questions: list[dict]) -> None:
    assert len(decision.answers) == len(questions)
    for answer, q in zip(decision.answers, questions, strict=True):
        assert answer.type == q["type"] and answer.name == q.get("name")
        if answer.type == "predicate":
            assert 0.0 <= answer.probability <= 1.0
            continue
        p = [x.probability for x in answer.probabilities]
        assert abs(sum(p) - 1.0) < 1e-6 and all(0.0 <= x <= 1.0 for x in p)
        if answer.type == "choice":
            values = [c["value"] for c in q["choices"]]
            assert [x.value for x in answer.probabilities] == values
            assert answer.choice == values[p.index(max(p))] and type(answer.choice) is type(values[p.index(max(p))])
            assert abs(answer.confidence - choice_confidence(p)) < 1e-9
        else:
            assert [(x.value, x.label) for x in answer.probabilities] == [
                (i, lv["label"]) for i, lv in enumerate(q["levels"])
            ]
            assert abs(answer.score - sum(i * x for i, x in enumerate(p))) < 1e-9
            assert abs(answer.confidence - score_confidence(p)) < 1e-9
    usage = decision.usage
    counters = [
        usage.input_tokens,
        usage.output_tokens,
        usage.total_tokens,
        usage.input_tokens_details.cached_tokens,
        usage.input_tokens_details.cache_write_tokens,
        usage.output_tokens_details.reasoning_tokens,
    ]
    assert all(type(v) is int and v >= 0 for v in counters)
    assert usage.total_tokens == usage.input_tokens and usage.output_tokens == 0


def test_every_question_type(client, server) -> None:
    decision = client.decisions.create(model="gpt-6-luna", input="I was charged twice. Refund me!", questions=QUESTIONS)
    check_answers(decision, QUESTIONS)
    assert decision.model == "tiny"


def test_every_input_item_and_content_part(client) -> None:
    items = [
        {"role": "system", "content": "You triage support tickets."},
        {
            "role": "developer",
            "content": [{"type": "input_text", "text": "Be strict.", "prompt_cache_breakpoint": {"mode": "explicit"}}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Ticket: "},
                {"type": "input_json", "data": [{"order": 4471, "amount": 12.5}, {"order": 4472}]},
            ],
        },
        {
            "role": "assistant",
            "phase": "commentary",
            "content": [
                {"type": "output_text", "text": "Looking."},
                {"type": "refusal", "refusal": "No refunds here."},
            ],
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "lookup",
            "arguments": '{"order": 4471}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "charged twice"}]},
        {"type": "custom_tool_call", "call_id": "k1", "name": "grep", "input": "refund", "namespace": "tools"},
        {"type": "custom_tool_call_output", "call_id": "k1", "output": "2 matches"},
    ]
    questions = [
        {"type": "predicate", "instructions": "Refund?"},
        {"type": "predicate", "name": "", "instructions": "Dup?"},
        {"type": "predicate", "name": "", "instructions": "Dup again?"},
    ]
    decision = client.decisions.create(
        model="tiny",
        input=items,
        questions=questions,
        prompt_cache_key="tenant-1",
        prompt_cache_options={"mode": "explicit", "ttl": "30m"},
        safety_identifier="user-7",
    )
    check_answers(decision, questions)
    assert [a.name for a in decision.answers] == [None, "", ""]


def test_answers_ignore_names_order_and_batching(client) -> None:
    ask = lambda qs: client.decisions.create(model="x", input="Hello.", questions=qs).answers  # noqa: E731
    alone = ask([QUESTIONS[1]])[0]
    renamed = ask([QUESTIONS[0], {**QUESTIONS[1], "name": "other"}, QUESTIONS[2]])[1]
    assert [p.probability for p in alone.probabilities] == pytest.approx(
        [p.probability for p in renamed.probabilities], abs=1e-5
    )


def test_validation_errors_are_bad_request_with_param(client) -> None:
    cases = [
        (
            {"questions": [{"type": "choice", "instructions": "x", "choices": [{"value": "a"}, {"value": "a"}]}]},
            "questions[0].choices[1].value",
            "invalid_value",
        ),
        ({"questions": []}, "questions", "array_below_min_length"),
        ({"questions": [{"type": "boolean", "instructions": "x"}]}, "questions[0].type", "invalid_value"),
        (
            {"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]},
            "input[0].call_id",
            "invalid_value",
        ),
        (
            {
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "image_url": "https://example.com/x.png"}]}
                ]
            },
            "input[0].content[0].image_url",
            "invalid_image_url",
        ),
        ({"prompt_cache_key": "k" * 65}, "prompt_cache_key", "string_above_max_length"),
    ]
    for override, param, code in cases:
        args = {"model": "gpt-6-luna", "input": "x", "questions": [QUESTIONS[0]], **override}
        with pytest.raises(openai_sdk.BadRequestError) as caught:
            client.decisions.create(**args)
        e = caught.value
        assert (e.status_code, e.param, e.code, e.type) == (400, param, code, "invalid_request_error")
        assert e.request_id and e.request_id.startswith("req_")


def test_images_on_the_text_only_model(client) -> None:
    content = [{"type": "input_text", "text": "Look: "}, {"type": "input_image", "image_url": PNG_URL, "detail": "low"}]
    with pytest.raises(openai_sdk.BadRequestError) as caught:
        client.decisions.create(
            model="gpt-6-luna", input=[{"role": "user", "content": content}], questions=[QUESTIONS[0]]
        )
    assert (caught.value.code, caught.value.param) == ("image_input_not_supported", "input[0].content[1].image_url")


def test_context_length_exceeded(client) -> None:
    with pytest.raises(openai_sdk.BadRequestError) as caught:
        client.decisions.create(model="gpt-6-luna", input="refund " * 5000, questions=[QUESTIONS[0]])
    assert (caught.value.code, caught.value.param) == ("context_length_exceeded", None)


def test_auth_errors(server) -> None:
    # the SDK refuses to start without a key, so "missing" is a non-Bearer Authorization header
    for key, headers, code in [("wrong-key", None, "invalid_api_key"), (KEY, {"Authorization": "Basic " + KEY}, None)]:
        with openai_sdk.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, default_headers=headers) as c:
            with pytest.raises(openai_sdk.AuthenticationError) as caught:
                c.decisions.create(model="gpt-6-luna", input="x", questions=[QUESTIONS[0]])
            assert (caught.value.status_code, caught.value.code, caught.value.param) == (401, code, None)
            with pytest.raises(openai_sdk.AuthenticationError):
                c.models.list()


def test_models_and_raw_response(client) -> None:
    assert [m.id for m in client.models.list()][:3] == ["tiny", "gpt-6-luna", "jev-latest"]
    raw = client.decisions.with_raw_response.create(model="gpt-6-luna", input="x", questions=[QUESTIONS[0]])
    assert raw.headers["content-type"] == "application/json"
    assert raw.headers["x-request-id"] == raw.headers["x-typesafe-request-id"]
    assert raw.parse().answers[0].type == "predicate"


def test_the_sdk_tool_runner_accepts_our_answers(client) -> None:
    executed = []
    runner = DecisionsToolRunner(
        observe=lambda: [{"type": "input_text", "text": f"{len(executed)} refunds issued"}],
        candidates=lambda _: [
            {"id": "refund", "description": "Issue the refund", "execute": lambda: executed.append(1)},
            {"id": "done", "description": "The task is complete", "done": True},
        ],
    )
    try:
        result = runner.run(client, {"model": "gpt-6-luna", "input": "Refund order 4471 once."}, max_steps=3)
        assert result["status"] == "unverified"
        decisions = result["decisions"]
    except DecisionsToolRunnerError as e:  # the tiny model may keep choosing the action
        assert e.reason == "step_limit"
        decisions = []
    for d in decisions:
        assert d.answers[0].name == "next_action" and math.isfinite(d.answers[0].confidence)
