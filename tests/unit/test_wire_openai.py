"""OpenAI Decisions wire layer (contract §1): parse/render on plain dicts, and the §1.6 table over HTTP."""

from __future__ import annotations

import base64
import json

import pytest
from fake_decider import FakeDecider
from wire_samples import DELETE, GIF, JPEG, PNG_URL, WEBP, data_url, make_app, openai_body, png, with_path

from decide.answers import Answer, Decision, Usage, choice_confidence, expected_score, score_confidence
from decide.errors import InvalidRequest
from decide.request import DEFAULT_FALSE, DEFAULT_TRUE, Image, Option, Text
from decide.wire import openai
from decide.wire.common import Limits

BIG = 1_048_577


def user(*parts) -> dict:
    return {"role": "user", "content": list(parts)}


def with_input(*items) -> dict:
    return openai_body(input=list(items))


def with_question(q: dict) -> dict:
    return openai_body(questions=[q])


CALL = {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"id": 7}'}
CUSTOM = {"type": "custom_tool_call", "call_id": "k1", "name": "grep", "input": "refund"}
Q0 = ("questions", 0)
CHOICES = ("questions", 1, "choices")
LEVELS = ("questions", 2, "levels")


def deep(n: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(n - 1):
        value = {"k": value}
    return value


# (body, code, param) — every client-caused row of contract §1.6 that parse() itself decides
PARSE_ERRORS = [
    # missing_required_parameter
    *[
        pytest.param(with_path(openai_body(), path, DELETE), "missing_required_parameter", param, id=f"missing-{param}")
        for path, param in [
            (("model",), "model"),
            (("input",), "input"),
            (("questions",), "questions"),
            ((*Q0, "type"), "questions[0].type"),
            ((*Q0, "instructions"), "questions[0].instructions"),
            (("questions", 1, "choices"), "questions[1].choices"),
            (("questions", 2, "levels"), "questions[2].levels"),
            ((*LEVELS, 0, "label"), "questions[2].levels[0].label"),
            ((*CHOICES, 0, "value"), "questions[1].choices[0].value"),
        ]
    ],
    pytest.param(
        with_input(user({"type": "input_text"})),
        "missing_required_parameter",
        "input[0].content[0].text",
        id="missing-text",
    ),
    pytest.param(
        with_input(user({"type": "input_image"})),
        "missing_required_parameter",
        "input[0].content[0].image_url",
        id="missing-image_url",
    ),
    pytest.param(
        with_input(user({"type": "input_json"})),
        "missing_required_parameter",
        "input[0].content[0].data",
        id="missing-data",
    ),
    pytest.param(
        with_input({"type": "message", "content": "x"}),
        "missing_required_parameter",
        "input[0].role",
        id="missing-role",
    ),
    pytest.param(with_input({"role": "user"}), "missing_required_parameter", "input[0].content", id="missing-content"),
    pytest.param(
        with_input({"content": "x"}), "missing_required_parameter", "input[0].type", id="missing-type-and-role"
    ),
    pytest.param(
        with_input(with_path(CALL, ("call_id",), DELETE)),
        "missing_required_parameter",
        "input[0].call_id",
        id="missing-call_id",
    ),
    pytest.param(
        with_input(with_path(CALL, ("name",), DELETE)),
        "missing_required_parameter",
        "input[0].name",
        id="missing-call-name",
    ),
    pytest.param(
        with_input(with_path(CALL, ("arguments",), DELETE)),
        "missing_required_parameter",
        "input[0].arguments",
        id="missing-arguments",
    ),
    pytest.param(
        with_input(with_path(CUSTOM, ("input",), DELETE)),
        "missing_required_parameter",
        "input[0].input",
        id="missing-custom-input",
    ),
    pytest.param(
        with_input(CALL, {"type": "function_call_output", "call_id": "c1"}),
        "missing_required_parameter",
        "input[1].output",
        id="missing-output",
    ),
    pytest.param(
        with_question({"type": "predicate", "instructions": [{"type": "input_text"}]}),
        "missing_required_parameter",
        "questions[0].instructions[0].text",
        id="missing-instruction-text",
    ),
    pytest.param(
        with_input({"role": "user", "content": [{"text": "x"}]}),
        "missing_required_parameter",
        "input[0].content[0].type",
        id="missing-part-type",
    ),
    pytest.param(
        with_input({"role": "assistant", "content": [{"type": "output_text"}]}),
        "missing_required_parameter",
        "input[0].content[0].text",
        id="missing-output-text",
    ),
    pytest.param(
        with_input({"role": "assistant", "content": [{"type": "refusal"}]}),
        "missing_required_parameter",
        "input[0].content[0].refusal",
        id="missing-refusal",
    ),
    pytest.param(
        with_input(CALL, {"type": "function_call_output", "output": "x"}),
        "missing_required_parameter",
        "input[1].call_id",
        id="missing-output-call_id",
    ),
    pytest.param(
        with_input(with_path(CUSTOM, ("name",), DELETE)),
        "missing_required_parameter",
        "input[0].name",
        id="missing-custom-name",
    ),
    pytest.param(
        with_input(CUSTOM, {"type": "custom_tool_call_output", "call_id": "k1"}),
        "missing_required_parameter",
        "input[1].output",
        id="missing-custom-output",
    ),
    pytest.param(
        with_question({"type": "choice", "instructions": "x", "choices": [{"value": "a"}, {"description": "b"}]}),
        "missing_required_parameter",
        "questions[0].choices[1].value",
        id="missing-second-value",
    ),
    # invalid_type
    pytest.param(openai_body(questions={}), "invalid_type", "questions", id="type-questions-object"),
    pytest.param(openai_body(questions="x"), "invalid_type", "questions", id="type-questions-string"),
    pytest.param(openai_body(model=5), "invalid_type", "model", id="type-model"),
    pytest.param(openai_body(model=None), "invalid_type", "model", id="type-model-null"),
    pytest.param(openai_body(input=5), "invalid_type", "input", id="type-input"),
    pytest.param(openai_body(input={"role": "user"}), "invalid_type", "input", id="type-input-object"),
    pytest.param(with_input("hello"), "invalid_type", "input[0]", id="type-item"),
    pytest.param(with_input({"role": "user", "content": 5}), "invalid_type", "input[0].content", id="type-content"),
    pytest.param(
        with_input(user({"type": "input_text", "text": 5})), "invalid_type", "input[0].content[0].text", id="type-text"
    ),
    pytest.param(with_input(user("hi")), "invalid_type", "input[0].content[0]", id="type-part"),
    pytest.param(
        with_input(user({"type": "input_json", "data": 5})),
        "invalid_type",
        "input[0].content[0].data",
        id="type-json-scalar",
    ),
    pytest.param(
        with_input(user({"type": "input_json", "data": "x"})),
        "invalid_type",
        "input[0].content[0].data",
        id="type-json-string",
    ),
    pytest.param(
        with_input(user({"type": "input_json", "data": [{"a": 1}, 2]})),
        "invalid_type",
        "input[0].content[0].data[1]",
        id="type-json-array-item",
    ),
    pytest.param(
        with_input(with_path(CALL, ("arguments",), {"id": 7})),
        "invalid_type",
        "input[0].arguments",
        id="type-arguments",
    ),
    pytest.param(
        with_path(openai_body(), (*CHOICES, 0, "value"), 3),
        "invalid_type",
        "questions[1].choices[0].value",
        id="type-value-number",
    ),
    pytest.param(
        with_path(openai_body(), (*CHOICES, 0, "value"), None),
        "invalid_type",
        "questions[1].choices[0].value",
        id="type-value-null",
    ),
    pytest.param(
        with_path(openai_body(), (*CHOICES, 0), "billing"),
        "invalid_type",
        "questions[1].choices[0]",
        id="type-choice-entry",
    ),
    pytest.param(
        with_path(openai_body(), (*CHOICES, 1, "description"), 5),
        "invalid_type",
        "questions[1].choices[1].description",
        id="type-description",
    ),
    pytest.param(
        with_path(openai_body(), (*LEVELS, 0, "label"), 0),
        "invalid_type",
        "questions[2].levels[0].label",
        id="type-label",
    ),
    pytest.param(
        with_path(openai_body(), (*Q0, "instructions"), {"text": "x"}),
        "invalid_type",
        "questions[0].instructions",
        id="type-instructions",
    ),
    pytest.param(with_path(openai_body(), (*Q0, "name"), 5), "invalid_type", "questions[0].name", id="type-name"),
    pytest.param(with_path(openai_body(), Q0, "Is it?"), "invalid_type", "questions[0]", id="type-question"),
    pytest.param(openai_body(prompt_cache_key=5), "invalid_type", "prompt_cache_key", id="type-cache-key"),
    pytest.param(
        openai_body(prompt_cache_options="implicit"), "invalid_type", "prompt_cache_options", id="type-cache-options"
    ),
    pytest.param(openai_body(safety_identifier=["x"]), "invalid_type", "safety_identifier", id="type-safety"),
    pytest.param(
        with_path(openai_body(), CHOICES, {"value": "a"}), "invalid_type", "questions[1].choices", id="type-choices"
    ),
    pytest.param(with_path(openai_body(), LEVELS, "Low,High"), "invalid_type", "questions[2].levels", id="type-levels"),
    pytest.param(
        with_path(openai_body(), (*LEVELS, 1), "Mid"), "invalid_type", "questions[2].levels[1]", id="type-level"
    ),
    pytest.param(
        with_input(user({"type": "input_image", "image_url": {"url": PNG_URL}})),
        "invalid_type",
        "input[0].content[0].image_url",
        id="type-image_url",
    ),
    pytest.param(
        with_input(user({"type": "input_image", "image_url": PNG_URL, "detail": 1})),
        "invalid_type",
        "input[0].content[0].detail",
        id="type-detail",
    ),
    pytest.param(
        with_input(user({"type": "input_text", "text": "x", "prompt_cache_breakpoint": "explicit"})),
        "invalid_type",
        "input[0].content[0].prompt_cache_breakpoint",
        id="type-breakpoint",
    ),
    pytest.param(
        with_input({"role": "assistant", "content": "x", "phase": 1}), "invalid_type", "input[0].phase", id="type-phase"
    ),
    pytest.param(with_input({**CALL, "status": True}), "invalid_type", "input[0].status", id="type-status"),
    pytest.param(with_input({**CALL, "call_id": 1}), "invalid_type", "input[0].call_id", id="type-call_id"),
    pytest.param(
        with_input(CALL, {"type": "function_call_output", "call_id": "c1", "output": {"text": "x"}}),
        "invalid_type",
        "input[1].output",
        id="type-output",
    ),
    pytest.param(with_input({"role": 1, "content": "x"}), "invalid_type", "input[0].role", id="type-role"),
    pytest.param(with_path(openai_body(), (*Q0, "type"), 1), "invalid_type", "questions[0].type", id="type-type"),
    pytest.param(
        openai_body(prompt_cache_options={"mode": 1}), "invalid_type", "prompt_cache_options.mode", id="type-mode"
    ),
    # invalid_value: enums, discriminators, duplicates, orphans, input_json limits
    pytest.param(
        with_path(openai_body(), (*Q0, "type"), "boolean"),
        "invalid_value",
        "questions[0].type",
        id="enum-question-type",
    ),
    pytest.param(
        with_input({"type": "reasoning", "summary": []}), "invalid_value", "input[0].type", id="enum-item-type"
    ),
    pytest.param(with_input({"role": "tool", "content": "x"}), "invalid_value", "input[0].role", id="enum-role"),
    pytest.param(
        with_input(user({"type": "input_image", "image_url": PNG_URL, "detail": "ultra"})),
        "invalid_value",
        "input[0].content[0].detail",
        id="enum-detail",
    ),
    pytest.param(
        openai_body(prompt_cache_options={"mode": "sometimes"}),
        "invalid_value",
        "prompt_cache_options.mode",
        id="enum-mode",
    ),
    pytest.param(
        openai_body(prompt_cache_options={"ttl": "1h"}), "invalid_value", "prompt_cache_options.ttl", id="enum-ttl"
    ),
    pytest.param(
        with_input({"role": "assistant", "content": "x", "phase": "draft"}),
        "invalid_value",
        "input[0].phase",
        id="enum-phase",
    ),
    pytest.param(with_input({**CALL, "status": "done"}), "invalid_value", "input[0].status", id="enum-status"),
    pytest.param(
        with_input({"role": "system", "content": [{"type": "input_image", "image_url": PNG_URL}]}),
        "invalid_value",
        "input[0].content[0].type",
        id="enum-system-part",
    ),
    pytest.param(
        with_input({"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}),
        "invalid_value",
        "input[0].content[0].type",
        id="enum-assistant-part",
    ),
    pytest.param(
        with_input(user({"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "implicit"}})),
        "invalid_value",
        "input[0].content[0].prompt_cache_breakpoint.mode",
        id="enum-breakpoint",
    ),
    pytest.param(
        with_question({"type": "predicate", "instructions": [{"type": "output_text", "text": "x"}]}),
        "invalid_value",
        "questions[0].instructions[0].type",
        id="enum-question-part",
    ),
    pytest.param(
        with_path(openai_body(), CHOICES, [{"value": "a"}, {"value": "a"}]),
        "invalid_value",
        "questions[1].choices[1].value",
        id="duplicate-choice",
    ),
    pytest.param(
        with_path(openai_body(), CHOICES, [{"value": False}, {"value": "x"}, {"value": False}]),
        "invalid_value",
        "questions[1].choices[2].value",
        id="duplicate-bool-choice",
    ),
    pytest.param(
        with_input({"type": "function_call_output", "call_id": "c1", "output": "x"}, CALL),
        "invalid_value",
        "input[0].call_id",
        id="orphan-output-before-call",
    ),
    pytest.param(
        with_input(CALL, {"type": "custom_tool_call_output", "call_id": "c1", "output": "x"}),
        "invalid_value",
        "input[1].call_id",
        id="orphan-custom-output",
    ),
    pytest.param(
        with_input(CUSTOM, {"type": "function_call_output", "call_id": "k1", "output": "x"}),
        "invalid_value",
        "input[1].call_id",
        id="orphan-function-output",
    ),
    pytest.param(
        with_input(user({"type": "input_json", "data": deep(33)})),
        "invalid_value",
        "input[0].content[0].data",
        id="json-depth",
    ),
    pytest.param(
        with_input(user({"type": "input_json", "data": {"v": list(range(10_000))}})),
        "invalid_value",
        "input[0].content[0].data",
        id="json-values",
    ),
    pytest.param(
        with_input(user({"type": "input_json", "data": {"v": "x" * (256 * 1024)}})),
        "invalid_value",
        "input[0].content[0].data",
        id="json-bytes",
    ),
    pytest.param(
        with_input(user({"type": "input_json", "data": {"v": float("inf")}})),
        "invalid_value",
        "input[0].content[0].data",
        id="json-non-finite",
    ),
    pytest.param(
        with_input(
            CALL, {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_json", "data": {}}]}
        ),
        "invalid_value",
        "input[1].output[0].type",
        id="enum-output-part",
    ),
    pytest.param(
        with_input(user({"type": "output_text", "text": "x"})),
        "invalid_value",
        "input[0].content[0].type",
        id="enum-user-part",
    ),
    pytest.param(
        with_input({**CALL, "status": None}, {"type": "function_call_output", "call_id": "c2", "output": "x"}),
        "invalid_value",
        "input[1].call_id",
        id="orphan-output-wrong-id",
    ),
    # array_below_min_length
    pytest.param(openai_body(questions=[]), "array_below_min_length", "questions", id="short-questions"),
    pytest.param(openai_body(input=[]), "array_below_min_length", "input", id="short-input"),
    pytest.param(
        with_path(openai_body(), CHOICES, [{"value": "a"}]),
        "array_below_min_length",
        "questions[1].choices",
        id="short-choices",
    ),
    pytest.param(
        with_path(openai_body(), LEVELS, [{"label": "a"}]),
        "array_below_min_length",
        "questions[2].levels",
        id="short-levels",
    ),
    pytest.param(
        with_path(openai_body(), LEVELS, []), "array_below_min_length", "questions[2].levels", id="short-levels-0"
    ),
    pytest.param(with_input(user()), "array_below_min_length", "input[0].content", id="short-content"),
    pytest.param(
        with_path(openai_body(), (*Q0, "instructions"), []),
        "array_below_min_length",
        "questions[0].instructions",
        id="short-instructions",
    ),
    pytest.param(
        with_input(CALL, {"type": "function_call_output", "call_id": "c1", "output": []}),
        "array_below_min_length",
        "input[1].output",
        id="short-output",
    ),
    # array_above_max_length
    pytest.param(
        openai_body(questions=[{"type": "predicate", "instructions": "q"}] * 401),
        "array_above_max_length",
        "questions",
        id="long-questions",
    ),
    pytest.param(
        with_path(openai_body(), CHOICES, [{"value": f"c{i}"} for i in range(256)]),
        "array_above_max_length",
        "questions[1].choices",
        id="long-choices",
    ),
    pytest.param(
        with_path(openai_body(), LEVELS, [{"label": f"l{i}"} for i in range(256)]),
        "array_above_max_length",
        "questions[2].levels",
        id="long-levels",
    ),
    pytest.param(
        with_input(user(*[{"type": "input_image", "image_url": PNG_URL}] * 129)),
        "array_above_max_length",
        "input[0].content[128]",
        id="long-images",
    ),
    pytest.param(
        openai_body(
            input=[user(*[{"type": "input_image", "image_url": PNG_URL}] * 128)],
            questions=[{"type": "predicate", "instructions": [{"type": "input_image", "image_url": PNG_URL}]}],
        ),
        "array_above_max_length",
        "questions[0].instructions[0]",
        id="long-images-with-questions",
    ),
    # string_above_max_length
    pytest.param(
        openai_body(prompt_cache_key="k" * 65), "string_above_max_length", "prompt_cache_key", id="long-cache-key"
    ),
    pytest.param(
        openai_body(safety_identifier="s" * 65), "string_above_max_length", "safety_identifier", id="long-safety"
    ),
    pytest.param(openai_body(input="x" * BIG), "string_above_max_length", "input", id="long-input"),
    pytest.param(
        with_input(user({"type": "input_text", "text": "x" * BIG})),
        "string_above_max_length",
        "input[0].content[0].text",
        id="long-text",
    ),
    pytest.param(
        with_path(openai_body(), (*Q0, "instructions"), "x" * BIG),
        "string_above_max_length",
        "questions[0].instructions",
        id="long-instructions",
    ),
    pytest.param(
        with_path(openai_body(), (*CHOICES, 0, "value"), "x" * BIG),
        "string_above_max_length",
        "questions[1].choices[0].value",
        id="long-value",
    ),
    *[
        pytest.param(body, "string_above_max_length", param, id=f"long-{label}")
        for label, body, param in [
            (
                "description",
                with_path(openai_body(), (*CHOICES, 1, "description"), "x" * BIG),
                "questions[1].choices[1].description",
            ),
            ("label", with_path(openai_body(), (*LEVELS, 0, "label"), "x" * BIG), "questions[2].levels[0].label"),
            ("arguments", with_input({**CALL, "arguments": "x" * BIG}), "input[0].arguments"),
            (
                "output",
                with_input(CALL, {"type": "function_call_output", "call_id": "c1", "output": "x" * BIG}),
                "input[1].output",
            ),
            ("message", with_input({"role": "system", "content": "x" * BIG}), "input[0].content"),
            (
                "refusal",
                with_input({"role": "assistant", "content": [{"type": "refusal", "refusal": "x" * BIG}]}),
                "input[0].content[0].refusal",
            ),
        ]
    ],
    # images
    *[
        pytest.param(
            with_input(user({"type": "input_image", "image_url": url})), code, "input[0].content[0].image_url", id=label
        )
        for label, url, code in [
            ("image-bad-base64", "data:image/png;base64,@@@@", "invalid_image"),
            ("image-empty", "data:image/png;base64,", "invalid_image"),
            ("image-not-an-image", data_url(b"hello, world"), "invalid_image"),
            ("image-bmp", data_url(b"BM" + b"\x00" * 40, "image/bmp"), "invalid_image"),
            ("image-remote-off", "https://example.com/cat.png", "invalid_image_url"),
            ("image-file-id", "file-abc123", "invalid_image_url"),
        ]
    ],
    pytest.param(
        with_question(
            {"type": "predicate", "instructions": [{"type": "input_image", "image_url": "data:image/png;base64,!"}]}
        ),
        "invalid_image",
        "questions[0].instructions[0].image_url",
        id="image-question",
    ),
]


@pytest.mark.parametrize(("body", "code", "param"), PARSE_ERRORS)
def test_parse_rejects(body: dict, code: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        openai.parse(body)
    assert (caught.value.code, openai.bracket_path(caught.value.path)) == (code, param)


@pytest.fixture(scope="module")
def client():
    return make_app().test_client()


# json.dumps writes inf as the invalid token Infinity: that row goes over HTTP as 1e999 below
HTTP_ERRORS = [p for p in PARSE_ERRORS if p.id != "json-non-finite"]


@pytest.mark.parametrize(("body", "code", "param"), HTTP_ERRORS)
def test_http_rejects(client, body: dict, code: str, param: str) -> None:
    r = client.post("/v1/decisions", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 400
    assert r.get_json() == {
        "error": {
            "message": r.get_json()["error"]["message"],
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }
    assert isinstance(r.get_json()["error"]["message"], str) and r.get_json()["error"]["message"]


@pytest.mark.parametrize(
    "raw", [b"{", b"", b"[1, 2]", b'"text"', b"null", b"\xff\xfe{}", b'{"model": NaN}', b'{"a": Infinity}']
)
def test_http_malformed_body(client, raw: bytes) -> None:
    r = client.post("/v1/decisions", data=raw, content_type="application/json")
    assert r.status_code == 400
    error = r.get_json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", None, None)


def test_http_non_finite_number_in_json_part(client) -> None:
    body = json.dumps(with_input(user({"type": "input_json", "data": {"v": 1}}))).replace('{"v": 1}', '{"v": 1e999}')
    r = client.post("/v1/decisions", data=body, content_type="application/json")
    assert (r.status_code, r.get_json()["error"]["code"]) == (400, "invalid_value")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            with_input(user({"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": PNG_URL})),
            "input[0].content[1].image_url",
        ),
        (
            with_question(
                {
                    "type": "predicate",
                    "instructions": [
                        {"type": "input_text", "text": "x"},
                        {"type": "input_image", "image_url": PNG_URL},
                    ],
                }
            ),
            "questions[0].instructions[1].image_url",
        ),
    ],
)
def test_http_images_on_text_only_model(client, body: dict, param: str) -> None:
    r = client.post("/v1/decisions", json=body)
    assert r.status_code == 400
    assert r.get_json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": param,
        "code": "image_input_not_supported",
    }


def test_http_images_reach_a_vision_decider() -> None:
    decider = FakeDecider(supports_images=True)
    r = (
        make_app(decider)
        .test_client()
        .post("/v1/decisions", json=with_input(user({"type": "input_image", "image_url": PNG_URL})))
    )
    assert r.status_code == 200
    assert decider.calls[-1].input == (Image(png(), "image/png"),)


def test_http_context_length_exceeded() -> None:
    r = make_app(FakeDecider(context_chars=50)).test_client().post("/v1/decisions", json=openai_body())
    assert r.status_code == 400
    assert r.get_json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": None,
        "code": "context_length_exceeded",
    }


def test_http_strict_models() -> None:
    decider = FakeDecider()
    client = make_app(decider, strict_models=True, aliases=("house-model",)).test_client()
    r = client.post("/v1/decisions", json=openai_body(model="gpt-4o"))
    assert r.status_code == 404
    assert r.get_json()["error"] | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    for name in ("gpt-6-luna", decider.model_id, "house-model"):
        assert client.post("/v1/decisions", json=openai_body(model=name)).status_code == 200


def test_http_lenient_models_answer_with_the_served_model(client) -> None:
    r = client.post("/v1/decisions", json=openai_body(model="any-model-name"))
    assert (r.status_code, r.get_json()["model"]) == (200, "fake/decider-1")


# ---------------------------------------------------------------- parsing valid bodies


def test_string_input_and_default_predicate_options() -> None:
    parsed = openai.parse(openai_body())
    assert parsed.request.input == (Text("I was charged twice for my March invoice. Please refund me."),)
    refund, team, anger = parsed.request.questions
    assert refund.options == (Option(False, DEFAULT_FALSE), Option(True, DEFAULT_TRUE))
    assert team.options == (Option("billing"), Option("technical", "Bugs and outages"), Option(True))
    assert anger.options == (Option("Calm"), Option("Annoyed"), Option("Angry", "Shouting"))
    assert (parsed.names, parsed.model) == (("refund", "team", "anger"), "gpt-6-luna")


def test_every_input_item_is_rendered_in_order() -> None:
    body = with_input(
        {"role": "system", "content": "Be strict."},
        {
            "role": "developer",
            "content": [{"type": "input_text", "text": "Route "}, {"type": "input_text", "text": "tickets."}],
        },
        {"role": "user", "content": "Refund me.", "type": "message"},
        {
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Checking"},
                {"type": "output_text", "text": "..."},
                {"type": "refusal", "refusal": "I cannot refund."},
            ],
            "phase": "commentary",
        },
        {"role": "assistant", "content": "Done.", "phase": None},
        CALL,
        {"type": "function_call_output", "call_id": "c1", "output": "paid twice", "status": "completed"},
        CUSTOM,
        {"type": "custom_tool_call_output", "call_id": "k1", "output": [{"type": "input_text", "text": "3 hits"}]},
        {
            "role": "user",
            "content": [{"type": "input_json", "data": {"amount": 12.0, "ids": [1, 2], "ok": True, "x": None}}],
        },
    )
    (text,) = openai.parse(body).request.input
    assert text == Text(
        "System: Be strict.\n\n"
        "Developer: Route tickets.\n\n"
        "Refund me.\n\n"
        "Assistant: Checking...\n\nAssistant (refusal): I cannot refund.\n\n"
        "Assistant: Done.\n\n"
        'Tool call lookup [c1]: {"id": 7}\n\n'
        "Tool result [c1]: paid twice\n\n"
        "Custom tool call grep [k1]: refund\n\n"
        "Custom tool result [k1]: 3 hits\n\n"
        '{"amount":12,"ids":[1,2],"ok":true,"x":null}'
    )


def test_images_stay_in_place_and_map_back_to_their_params() -> None:
    body = with_input(
        user(
            {"type": "input_text", "text": "Before "},
            {"type": "input_image", "image_url": data_url(JPEG, "image/jpeg"), "detail": "low"},
            {"type": "input_text", "text": " after"},
        ),
        CALL,
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_image", "image_url": data_url(GIF, "image/gif")}],
        },
    )
    parsed = openai.parse(body)
    assert parsed.request.input == (
        Text("Before "),
        Image(JPEG, "image/jpeg"),
        Text(' after\n\nTool call lookup [c1]: {"id": 7}\n\nTool result [c1]: '),
        Image(GIF, "image/gif"),
    )
    assert parsed.image_params == {
        ("input", 1): "input[0].content[1].image_url",
        ("input", 3): "input[2].output[0].image_url",
    }


def test_question_parts_text_json_and_images() -> None:
    q = {
        "type": "choice",
        "choices": [{"value": "a"}, {"value": "b"}],
        "instructions": [
            {"type": "input_text", "text": "Which photo matches "},
            {"type": "input_image", "image_url": data_url(WEBP, "image/webp")},
            {"type": "input_json", "data": [{"sku": 1}]},
            {"type": "input_image", "image_url": PNG_URL, "detail": "high"},
        ],
    }
    parsed = openai.parse(with_question(q))
    (question,) = parsed.request.questions
    assert question.instructions == 'Which photo matches [{"sku":1}]'
    assert question.attachments == (
        Text("Image reference: 1"),
        Image(WEBP, "image/webp"),
        Text("Image reference: 2"),
        Image(png()),
    )
    assert parsed.image_params == {
        ("questions", 0, "attachments", 1): "questions[0].instructions[1].image_url",
        ("questions", 0, "attachments", 3): "questions[0].instructions[3].image_url",
    }


def test_image_format_comes_from_the_bytes() -> None:
    parsed = openai.parse(with_input(user({"type": "input_image", "image_url": data_url(JPEG, "image/png")})))
    assert parsed.request.input == (Image(JPEG, "image/jpeg"),)


def test_remote_images_use_the_configured_fetcher() -> None:
    fetched = []
    limits = Limits(fetch_image=lambda url: fetched.append(url) or png())
    parsed = openai.parse(
        with_input(user({"type": "input_image", "image_url": "https://example.com/a.png"})), limits=limits
    )
    assert (parsed.request.input, fetched) == ((Image(png()),), ["https://example.com/a.png"])


@pytest.mark.parametrize(("name", "expected"), [(DELETE, None), (None, None), ("", ""), ("q 🙂", "q 🙂")])
def test_names(name, expected) -> None:
    body = with_path(openai_body(), (*Q0, "name"), name)
    assert openai.parse(body).names[0] == expected


def test_names_never_reach_the_request() -> None:
    renamed = openai_body()
    for i, q in enumerate(renamed["questions"]):
        q["name"] = "same" if i else ""
    unnamed = openai_body()
    for q in unnamed["questions"]:
        del q["name"]
    assert openai.parse(renamed).request == openai.parse(unnamed).request == openai.parse(openai_body()).request


def test_accepted_edges() -> None:
    body = openai_body(
        input="",
        unknown_field={"ignored": True},
        prompt_cache_key="k" * 64,
        safety_identifier="user-1",
        prompt_cache_options={"mode": None, "ttl": "30m"},
        questions=[
            {
                "type": "choice",
                "instructions": "x",
                "choices": [{"value": "true"}, {"value": True}, {"value": ""}, {"value": False}],
            },
            {
                "type": "choice",
                "instructions": "x",
                "choices": [{"value": f"Queue {i:03d}", "description": ""} for i in range(255)],
            },
            {
                "type": "score",
                "instructions": "x",
                "levels": [{"label": "same"}, {"label": "same"}] * 127 + [{"label": "top"}],
            },
        ],
    )
    parsed = openai.parse(body)
    assert [len(q.options) for q in parsed.request.questions] == [4, 255, 255]
    assert (
        openai.parse(openai_body(questions=[{"type": "predicate", "instructions": "q"}] * 400)).names == (None,) * 400
    )
    many = with_input(
        user(*[{"type": "input_image", "image_url": PNG_URL, "prompt_cache_breakpoint": {"mode": "explicit"}}] * 128)
    )
    assert len(openai.parse(many).request.images) == 128


def test_max_questions_limit_is_configurable() -> None:
    body = openai_body(questions=[{"type": "predicate", "instructions": "q"}] * 3)
    with pytest.raises(InvalidRequest) as caught:
        openai.parse(body, limits=Limits(max_questions=2))
    assert caught.value.code == "array_above_max_length"


def test_base64_without_padding_is_accepted() -> None:
    raw = base64.b64encode(png()).decode().rstrip("=")
    assert openai.parse(
        with_input(user({"type": "input_image", "image_url": f"data:image/png;base64,{raw}"}))
    ).request.images


# ---------------------------------------------------------------- rendering


def decision_for(parsed: openai.Parsed, distributions: list[list[float]]) -> Decision:
    answers = tuple(
        Answer(q, tuple(p), tuple(0.0 for _ in p)) for q, p in zip(parsed.request.questions, distributions, strict=True)
    )
    return Decision(
        "served/model", answers, Usage(input_tokens=812, cached_tokens=100, cache_write_tokens=50, computed_tokens=700)
    )


def test_render_matches_the_contract_example() -> None:
    parsed = openai.parse(openai_body())
    body = openai.render(decision_for(parsed, [[0.07, 0.93], [0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]), parsed)
    assert list(body) == ["model", "answers", "usage"]
    refund, team, anger = body["answers"]
    assert refund == {"type": "predicate", "name": "refund", "probability": 0.93}
    assert team == {
        "type": "choice",
        "name": "team",
        "choice": "billing",
        "confidence": choice_confidence([0.7, 0.2, 0.1]),
        "probabilities": [
            {"value": "billing", "probability": 0.7},
            {"value": "technical", "probability": 0.2},
            {"value": True, "probability": 0.1},
        ],
    }
    assert anger == {
        "type": "score",
        "name": "anger",
        "score": expected_score([0.1, 0.1, 0.8]),
        "confidence": score_confidence([0.1, 0.1, 0.8]),
        "probabilities": [
            {"value": 0, "label": "Calm", "probability": 0.1},
            {"value": 1, "label": "Annoyed", "probability": 0.1},
            {"value": 2, "label": "Angry", "probability": 0.8},
        ],
    }
    assert (
        abs(team["confidence"] - 0.55) < 1e-9
        and abs(anger["score"] - 1.7) < 1e-9
        and abs(anger["confidence"] - 0.55) < 1e-9
    )
    assert body["usage"] == {
        "input_tokens": 812,
        "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 50},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 812,
    }
    assert body["model"] == "served/model"


def test_render_typed_choice_and_unnamed_answers() -> None:
    q = {"type": "choice", "instructions": "x", "choices": [{"value": "true"}, {"value": True}]}
    parsed = openai.parse(openai_body(questions=[q]))
    (answer,) = openai.render(decision_for(parsed, [[0.4, 0.6]]), parsed)["answers"]
    assert answer["choice"] is True and answer["name"] is None
    assert [p["value"] for p in answer["probabilities"]] == ["true", True]


def test_render_ties_pick_the_first_option() -> None:
    parsed = openai.parse(openai_body())
    body = openai.render(decision_for(parsed, [[0.5, 0.5], [0.4, 0.4, 0.2], [0.4, 0.4, 0.2]]), parsed)
    assert body["answers"][1]["choice"] == "billing"
    assert body["answers"][2]["confidence"] == 0.0


@pytest.mark.parametrize("bad", [[float("nan"), 1.0], [0.5, 0.6], [-0.1, 1.1], [float("inf"), 0.0]])
def test_render_refuses_a_broken_distribution(bad: list[float]) -> None:
    parsed = openai.parse(with_question({"type": "predicate", "instructions": "q"}))
    with pytest.raises(ValueError):
        openai.render(decision_for(parsed, [bad]), parsed)
