"""TypeSafe System One wire layer (contract §2): parse/render on plain dicts, and the §2.7 table over HTTP."""

from __future__ import annotations

import base64
import json
import unicodedata

import pytest
from fake_decider import FakeDecider
from wire_samples import DELETE, JPEG, make_app, png, systemone_body, with_path

from decide.answers import Answer, Decision, Usage, choice_confidence, expected_score, score_confidence
from decide.request import DEFAULT_FALSE, DEFAULT_TRUE, Image, Option, Text
from decide.wire import systemone
from decide.wire.common import FormPart, Limits

QS = ("questions",)
B64 = base64.b64encode(png()).decode()


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def asset_body(assets, state="Photo: <img:1>", **top) -> dict:
    return systemone_body(state=state, assets=assets, **top)


ONE_ASSET = {"<img:1>": {"type": "image", "format": "png", "data_base64": B64}}

# (body, [(loc, type), ...]) — every row of contract §2.7 that parse() decides
PARSE_ERRORS = [
    pytest.param([], [(["body"], "dict_type")], id="body-not-object"),
    pytest.param("text", [(["body"], "dict_type")], id="body-string"),
    *[
        pytest.param(
            with_path(systemone_body(), (field,), DELETE), [(["body", field], "missing")], id=f"missing-{field}"
        )
        for field in ("model", "state", "questions")
    ],
    *[
        pytest.param(systemone_body(state=v), [(["body", "state"], "string_type")], id=f"state-{v!r}")
        for v in (None, 3, 2.5, True)
    ],
    pytest.param(systemone_body(model=5), [(["body", "model"], "string_type")], id="model-number"),
    pytest.param(systemone_body(model=None), [(["body", "model"], "string_type")], id="model-null"),
    pytest.param(
        systemone_body(questions=[{"type": "noul"}]), [(["body", "questions"], "dict_type")], id="questions-array"
    ),
    pytest.param(systemone_body(questions={}), [(["body", "questions"], "too_short")], id="questions-empty"),
    pytest.param(
        systemone_body(questions={"q.1": "Is it?"}), [(["body", "questions", "q.1"], "dict_type")], id="question-string"
    ),
    pytest.param(
        systemone_body(questions={"a.b c": {"instructions": "x"}}),
        [(["body", "questions", "a.b c"], "union_tag_not_found")],
        id="type-missing",
    ),
    pytest.param(
        systemone_body(questions={"q": {"type": "boolean", "instructions": "x"}}),
        [(["body", "questions", "q"], "union_tag_invalid")],
        id="type-unknown",
    ),
    pytest.param(
        systemone_body(questions={"q": {"type": 7}}),
        [(["body", "questions", "q"], "union_tag_invalid")],
        id="type-number",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "refund", "instructions"), 42),
        [(["body", "questions", "refund", "noul", "instructions"], "string_type")],
        id="instructions-number",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "team", "criteria", "Sales"), False),
        [(["body", "questions", "team", "choice", "criteria", "Sales"], "string_type")],
        id="description-bool",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria", 1), 1),
        [(["body", "questions", "anger", "score", "criteria", 1], "string_type")],
        id="level-number",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria", 1), None),
        [(["body", "questions", "anger", "score", "criteria", 1], "string_type")],
        id="level-null",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "refund", "criteria"), {"true": 1}),
        [(["body", "questions", "refund", "noul", "criteria", "true"], "string_type")],
        id="noul-side-number",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "refund", "criteria"), "yes"),
        [(["body", "questions", "refund", "noul", "criteria"], "model_type")],
        id="noul-criteria-string",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "team", "criteria"), DELETE),
        [(["body", "questions", "team", "choice", "criteria"], "missing")],
        id="choice-criteria-missing",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "team", "criteria"), ["Billing", "Sales"]),
        [(["body", "questions", "team", "choice", "criteria"], "dict_type")],
        id="choice-criteria-array",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "team", "criteria"), {}),
        [(["body", "questions", "team", "choice", "criteria"], "too_short")],
        id="choice-criteria-empty",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "team", "criteria"), {f"Queue {i:03d}": None for i in range(256)}),
        [(["body", "questions", "team", "choice", "criteria"], "too_long")],
        id="choice-256",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria"), DELETE),
        [(["body", "questions", "anger", "score", "criteria"], "missing")],
        id="score-criteria-missing",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria"), {"0": "Calm", "1": "Angry"}),
        [(["body", "questions", "anger", "score", "criteria"], "list_type")],
        id="score-map-form",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria"), []),
        [(["body", "questions", "anger", "score", "criteria"], "too_short")],
        id="score-empty",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria"), [f"Level {i}" for i in range(11)]),
        [(["body", "questions", "anger", "score", "criteria"], "too_long")],
        id="score-11",
    ),
    pytest.param(
        systemone_body(questions={f"q{i}": {"type": "noul"} for i in range(401)}),
        [(["body", "questions"], "too_long")],
        id="questions-401",
    ),
    *[
        pytest.param(
            with_path(systemone_body(), (*QS, qid, "instructions"), bad),
            [(["body", "questions", qid, kind, "instructions"], "string_type")],
            id=f"instructions-{kind}-{bad!r}",
        )
        for qid, kind in (("refund", "noul"), ("team", "choice"), ("anger", "score"))
        for bad in (True, 2.5)
    ],
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria", 0), False),
        [(["body", "questions", "anger", "score", "criteria", 0], "string_type")],
        id="level-bool",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "team", "criteria", "Billing"), 3),
        [(["body", "questions", "team", "choice", "criteria", "Billing"], "string_type")],
        id="description-number",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "refund", "criteria"), {"true": "Refund", "false": False}),
        [(["body", "questions", "refund", "noul", "criteria", "false"], "string_type")],
        id="noul-side-bool",
    ),
    *[
        pytest.param(
            with_path(systemone_body(), (*QS, "refund", "criteria"), bad),
            [(["body", "questions", "refund", "noul", "criteria"], "model_type")],
            id=f"noul-criteria-{type(bad).__name__}",
        )
        for bad in (["yes", "no"], 1, True)
    ],
    *[
        pytest.param(
            with_path(systemone_body(), (*QS, "team", "criteria"), bad),
            [(["body", "questions", "team", "choice", "criteria"], "dict_type")],
            id=f"choice-criteria-{type(bad).__name__}",
        )
        for bad in ("Billing", None, 3)
    ],
    *[
        pytest.param(
            with_path(systemone_body(), (*QS, "anger", "criteria"), bad),
            [(["body", "questions", "anger", "score", "criteria"], "list_type")],
            id=f"score-criteria-{type(bad).__name__}",
        )
        for bad in ("Calm, Angry", None, 3)
    ],
    pytest.param(systemone_body(questions=None), [(["body", "questions"], "dict_type")], id="questions-null"),
    pytest.param(systemone_body(questions="q"), [(["body", "questions"], "dict_type")], id="questions-string"),
    pytest.param(
        systemone_body(questions={"q": None}), [(["body", "questions", "q"], "dict_type")], id="question-null"
    ),
    pytest.param(
        systemone_body(questions={"q": ["noul"]}), [(["body", "questions", "q"], "dict_type")], id="question-array"
    ),
    pytest.param(
        systemone_body(questions={"q": {"type": None}}),
        [(["body", "questions", "q"], "union_tag_not_found")],
        id="type-null",
    ),
    # assets
    pytest.param(asset_body(["<img:1>"]), [(["body", "assets"], "dict_type")], id="assets-array"),
    pytest.param(asset_body({}), [(["body", "assets"], "too_short")], id="assets-empty"),
    pytest.param(asset_body({"<img:1>": "png"}), [(["body", "assets", "<img:1>"], "dict_type")], id="asset-not-object"),
    pytest.param(
        asset_body({"<img:1>": {"type": "video", "format": "png", "data_base64": B64}}),
        [(["body", "assets", "<img:1>", "type"], "value_error")],
        id="asset-type",
    ),
    pytest.param(
        asset_body({"<img:1>": {"format": "png", "data_base64": "!!not base64!!"}}),
        [(["body", "assets", "<img:1>", "data_base64"], "value_error")],
        id="asset-bad-base64",
    ),
    pytest.param(
        asset_body({"<img:1>": {"format": "png", "data_base64": ""}}),
        [(["body", "assets", "<img:1>", "data_base64"], "value_error")],
        id="asset-empty-base64",
    ),
    pytest.param(
        asset_body({"<img:1>": {"format": "png", "data_base64": base64.b64encode(b"not an image").decode()}}),
        [(["body", "assets", "<img:1>", "data_base64"], "value_error")],
        id="asset-not-image",
    ),
    pytest.param(
        asset_body({"<img:1>": {"format": "png"}}),
        [(["body", "assets", "<img:1>", "data_base64"], "missing")],
        id="asset-no-data",
    ),
    pytest.param(
        asset_body({"<img:1>": {"data_base64": B64}}),
        [(["body", "assets", "<img:1>", "format"], "missing")],
        id="asset-no-format",
    ),
    pytest.param(
        asset_body({"<img:1>": {"type": "image", "part": "asset-0"}}),
        [(["body", "assets", "<img:1>", "part"], "value_error")],
        id="asset-unknown-part",
    ),
    pytest.param(
        asset_body({"  ": {"format": "png", "data_base64": B64}}),
        [(["body", "assets", "  "], "value_error")],
        id="asset-blank-key",
    ),
    pytest.param(
        asset_body({**ONE_ASSET, "<img:2>": {"format": "png", "data_base64": B64}}),
        [(["body", "assets"], "value_error")],
        id="asset-unreferenced",
    ),
    pytest.param(
        asset_body({"<img:1>": {"format": "gif", "data_base64": B64}}),
        [(["body", "assets", "<img:1>", "format"], "value_error")],
        id="asset-format",
    ),
    pytest.param(
        asset_body({"<img:1>": {"format": "png", "data_base64": 5}}),
        [(["body", "assets", "<img:1>", "data_base64"], "string_type")],
        id="asset-base64-number",
    ),
    pytest.param(
        asset_body({"<img:1>": {"type": "image", "part": 0}}),
        [(["body", "assets", "<img:1>", "part"], "string_type")],
        id="asset-part-number",
    ),
    pytest.param(
        asset_body({"x" * 1025: {"format": "png", "data_base64": B64}}, state="x" * 1025),
        [(["body", "assets", "x" * 1025], "value_error")],
        id="asset-long-key",
    ),
    pytest.param(
        asset_body(None, state="no images", questions={"q": {"type": "noul"}}) | {"assets": 3},
        [(["body", "assets"], "dict_type")],
        id="assets-number",
    ),
    # structural limits of "text"
    pytest.param(
        systemone_body(state=nested(65)), [(["body", "state", *[0] * 64], "value_error")], id="state-too-deep"
    ),
    pytest.param(
        systemone_body(state={"x": [1.0, float("nan")]}), [(["body", "state", "x", 1], "value_error")], id="state-nan"
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "refund", "instructions"), {"a": nested(64)}),
        [(["body", "questions", "refund", "noul", "instructions", "a", *[0] * 63], "value_error")],
        id="instructions-too-deep",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "anger", "criteria", 2), [1, float("-inf")]),
        [(["body", "questions", "anger", "score", "criteria", 2, 1], "value_error")],
        id="level-inf",
    ),
    pytest.param(
        with_path(systemone_body(), (*QS, "team", "criteria", "Sales"), {"w": float("inf")}),
        [(["body", "questions", "team", "choice", "criteria", "Sales", "w"], "value_error")],
        id="description-inf",
    ),
]


def locs(entries: list[dict]) -> list[tuple[list, str]]:
    return [(e["loc"], e["type"]) for e in entries]


@pytest.mark.parametrize(("body", "expected"), PARSE_ERRORS)
def test_parse_rejects(body, expected) -> None:
    with pytest.raises(systemone.ValidationFailed) as caught:
        systemone.parse(body)
    assert locs(caught.value.entries) == expected
    assert all(isinstance(e["msg"], str) and e["msg"] for e in caught.value.entries)


@pytest.fixture(scope="module")
def client():
    return make_app().test_client()


# json.dumps cannot write NaN/Infinity validly: those rows are checked over HTTP with raw text below
HTTP_ERRORS = [p for p in PARSE_ERRORS if p.id not in ("state-nan", "description-inf", "level-inf")]


@pytest.mark.parametrize(("body", "expected"), HTTP_ERRORS)
def test_http_rejects(client, body, expected) -> None:
    r = client.post("/v1/systemone", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 422
    assert list(r.get_json()) == ["detail"]
    assert locs(r.get_json()["detail"]) == expected


@pytest.mark.parametrize(
    ("raw", "offset"),
    [
        (b'{"model": "jev-latest", "state": "x", "questions": {', 52),
        (b"", 0),
        (b"{'a': 1}", 1),
        (b'{"state": NaN}', 10),
        (b"\xef\xbb\xbf{}", 0),
        (b'{"a": "\xff"}', 7),
    ],
)
def test_http_malformed_json(client, raw: bytes, offset: int) -> None:
    r = client.post("/v1/systemone", data=raw, content_type="application/json")
    assert r.status_code == 422
    (entry,) = r.get_json()["detail"]
    assert (entry["loc"], entry["type"]) == (["body", offset], "json_invalid")


def test_http_non_finite_number_in_state(client) -> None:
    raw = b'{"model": "jev-latest", "state": {"x": [1, -1e999]}, "questions": {"q": {"type": "noul"}}}'
    r = client.post("/v1/systemone", data=raw, content_type="application/json")
    assert r.status_code == 422
    assert locs(r.get_json()["detail"]) == [(["body", "state", "x", 1], "value_error")]


def test_all_errors_are_reported_in_document_order() -> None:
    body = {
        "questions": {"a": {"type": "score", "criteria": [None, 2]}, "b": {"type": "choice", "criteria": {}}},
        "model": 1,
    }
    with pytest.raises(systemone.ValidationFailed) as caught:
        systemone.parse(body)
    assert locs(caught.value.entries) == [
        (["body", "model"], "string_type"),
        (["body", "state"], "missing"),
        (["body", "questions", "a", "score", "criteria", 0], "string_type"),
        (["body", "questions", "a", "score", "criteria", 1], "string_type"),
        (["body", "questions", "b", "choice", "criteria"], "too_short"),
    ]


def test_box_questions_are_a_usage_error(client) -> None:
    body = systemone_body(questions={"where": {"type": "box", "instructions": "Find the cat"}})
    with pytest.raises(systemone.UsageError):
        systemone.parse(body)
    r = client.post("/v1/systemone", json=body)
    assert r.status_code == 400
    assert r.get_json()["detail"]["error_type"] == "api_usage_error"


# ---------------------------------------------------------------- parsing valid bodies


@pytest.mark.parametrize(
    ("state", "text"),
    [
        ("plain text", "plain text"),
        ("", ""),
        ({}, "{}"),
        ([], "[]"),
        (
            {"subject": "Charged twice", "n": 3, "x": 1.0, "tiny": 1e-7, "ok": None, "k": ["é", "🙂"]},
            '{"subject":"Charged twice","n":3,"x":1,"tiny":1e-7,"ok":null,"k":["é","🙂"]}',
        ),
    ],
)
def test_state_text(state, text: str) -> None:
    parsed = systemone.parse(systemone_body(state=state))
    assert parsed.request.input == ((Text(text),) if text else ())


@pytest.mark.parametrize(
    ("criteria", "true", "false"),
    [
        (DELETE, DEFAULT_TRUE, DEFAULT_FALSE),
        (None, DEFAULT_TRUE, DEFAULT_FALSE),
        ({}, DEFAULT_TRUE, DEFAULT_FALSE),
        ({"true": "They want a refund", "false": "Anything else"}, "They want a refund", "Anything else"),
        ({"true": "They want a refund"}, "They want a refund", DEFAULT_FALSE),
        ({"false": "Only a question"}, DEFAULT_TRUE, "Only a question"),
        ({"true": None, "false": "No"}, None, "No"),
        (
            {"true": {"examples": ["refund me"]}, "false": ["questions"], "maybe": 3},
            '{"examples":["refund me"]}',
            '["questions"]',
        ),
    ],
)
def test_noul_criteria(criteria, true, false) -> None:
    body = (
        with_path(systemone_body(), (*QS, "refund", "criteria"), criteria)
        if criteria is not DELETE
        else systemone_body()
    )
    refund = systemone.parse(body).request.questions[0]
    assert (refund.kind, refund.options) == ("predicate", (Option(False, false), Option(True, true)))


def test_noul_without_instructions() -> None:
    body = systemone_body(questions={"threat": {"type": "noul", "criteria": {"true": "Threatens a chargeback"}}})
    (q,) = systemone.parse(body).request.questions
    assert q.instructions == ""


def test_choice_names_round_trip_exactly() -> None:
    nfc, nfd = "café", unicodedata.normalize("NFD", "café")
    criteria = {nfc: None, nfd: "decomposed", "Café": {"owns": ["x"]}, "환불 요청": "고객", "🙂": None, "": None}
    parsed = systemone.parse(
        systemone_body(questions={"k": {"type": "choice", "instructions": ["Route it.", 1], "criteria": criteria}})
    )
    (q,) = parsed.request.questions
    assert [o.value for o in q.options] == list(criteria)
    assert [o.description for o in q.options] == [None, "decomposed", '{"owns":["x"]}', "고객", None, None]
    assert q.instructions == '["Route it.",1]'


def test_score_levels() -> None:
    levels = ["Calm", "", {"label": "Angry", "signals": ["threats"]}, ["a", 2.0]]
    parsed = systemone.parse(systemone_body(questions={"s": {"type": "score", "criteria": levels}}))
    (q,) = parsed.request.questions
    assert q.options == (
        Option("Calm"),
        Option("1"),
        Option('{"label":"Angry","signals":["threats"]}'),
        Option('["a",2]'),
    )
    assert parsed.legends == (tuple(levels),)


@pytest.mark.parametrize("n", [1, 2, 10])
def test_score_level_counts(n: int) -> None:
    (q,) = systemone.parse(
        systemone_body(questions={"s": {"type": "score", "criteria": [f"L{i}" for i in range(n)]}})
    ).request.questions
    assert len(q.options) == n


@pytest.mark.parametrize("n", [1, 2, 255])
def test_choice_option_counts(n: int) -> None:
    criteria = {f"Queue {i:03d}": f"Tickets routed to queue {i}" for i in range(n)}
    (q,) = systemone.parse(systemone_body(questions={"c": {"type": "choice", "criteria": criteria}})).request.questions
    assert len(q.options) == n


def test_ids_unknown_fields_and_order_never_reach_the_request() -> None:
    base = systemone.parse(systemone_body()).request
    renamed = systemone_body()
    renamed["questions"] = {
        new: renamed["questions"][old]
        for old, new in zip(["refund", "team", "anger"], ["zz.1", "Q 🙂", ""], strict=True)
    }
    with_extras = systemone_body(x_trace_id="t", seed=7, x_nonce="n")
    reversed_body = systemone_body()
    reversed_body["questions"] = dict(reversed(list(reversed_body["questions"].items())))
    assert systemone.parse(renamed).request == base == systemone.parse(with_extras).request
    assert systemone.parse(reversed_body).request.questions == base.questions[::-1]
    assert systemone.parse(renamed).ids == ("zz.1", "Q 🙂", "")


# ---------------------------------------------------------------- assets and placeholders


def test_state_images_follow_the_state_text() -> None:
    assets = {
        "<img:1>": {"format": "png", "data_base64": B64},
        "<img:2>": {"type": "image", "format": "jpg", "data_base64": base64.b64encode(JPEG).decode()},
    }
    parsed = systemone.parse(asset_body(assets, state={"front": "<img:2>", "back": "see <img:1> and <img:2>"}))
    assert parsed.request.input == (
        Text('{"front":"<img:2>","back":"see <img:1> and <img:2>"}\n\nImage reference: <img:2>'),
        Image(JPEG, "image/jpeg"),
        Text("\n\nImage reference: <img:1>"),
        Image(png()),
    )


def test_question_images_become_attachments() -> None:
    body = asset_body(ONE_ASSET, state="A photo follows.")
    body["questions"]["team"]["criteria"]["Sales"] = "Looks like <img:1>"
    parsed = systemone.parse(body)
    assert parsed.request.input == (Text("A photo follows."),)
    assert parsed.request.questions[1].attachments == (Text("Image reference: <img:1>"), Image(png()))
    assert parsed.request.questions[0].attachments == ()


def test_longest_placeholder_wins_at_the_same_position() -> None:
    assets = {
        "<a>": {"format": "png", "data_base64": B64},
        "<a>>": {"format": "jpeg", "data_base64": base64.b64encode(JPEG).decode()},
    }
    with pytest.raises(systemone.ValidationFailed) as caught:  # "<a>>" swallows the only "<a>"
        systemone.parse(asset_body(assets, state="x <a>> y"))
    assert caught.value.entries[0]["msg"].endswith("'<a>' is not referenced in state, instructions or criteria")
    parsed = systemone.parse(asset_body(assets, state="x <a>> y <a>"))
    assert [p for p in parsed.request.input if isinstance(p, Image)] == [Image(JPEG, "image/jpeg"), Image(png())]


def test_keys_are_never_scanned() -> None:
    body = asset_body(ONE_ASSET, state="no reference here")
    body["questions"]["team"]["criteria"]["<img:1>"] = None
    body["questions"]["<img:1>"] = {"type": "noul", "criteria": {"<img:1>": "x"}}
    with pytest.raises(systemone.ValidationFailed) as caught:
        systemone.parse(body)
    assert locs(caught.value.entries) == [(["body", "assets"], "value_error")]


def test_multipart_parts() -> None:
    body = asset_body(
        {"<img:1>": {"type": "image", "part": "asset-0"}, "<img:2>": {"type": "image", "part": "asset-1"}},
        state="<img:1> then <img:2>",
    )
    parsed = systemone.parse(body, parts={"asset-0": png(), "asset-1": JPEG})
    assert [p for p in parsed.request.input if isinstance(p, Image)] == [Image(png()), Image(JPEG, "image/jpeg")]


@pytest.mark.parametrize(
    ("assets", "parts", "loc"),
    [
        ({"<img:1>": {"part": "asset-0"}}, {"asset-0": png(), "asset-1": png()}, ["body", "assets"]),
        (
            {"<img:1>": {"part": "asset-0"}, "<img:2>": {"part": "asset-0"}},
            {"asset-0": png()},
            ["body", "assets", "<img:2>", "part"],
        ),
        ({"<img:1>": {"part": "asset-0"}}, {"asset-0": b"not an image"}, ["body", "assets", "<img:1>", "part"]),
        (None, {"asset-0": png()}, ["body", "assets"]),
    ],
)
def test_multipart_parts_must_be_claimed_once(assets, parts, loc) -> None:
    body = asset_body(assets, state="<img:1> <img:2>")
    with pytest.raises(systemone.ValidationFailed) as caught:
        systemone.parse(body, parts=parts)
    assert caught.value.entries[0]["loc"] == loc


def test_split_form() -> None:
    request = FormPart("request", "application/json", json.dumps(systemone_body()).encode())
    body, parts = systemone.split_form([request, FormPart("asset-0", "image/png", png())])
    assert (body, parts) == (systemone_body(), {"asset-0": png()})
    for bad in (
        [FormPart("asset-0", "image/png", png())],
        [request, request],
        [request, FormPart("a", "", b"1"), FormPart("a", "", b"2")],
    ):
        with pytest.raises(systemone.ValidationFailed):
            systemone.split_form(bad)


def test_max_questions_limit_is_configurable() -> None:
    with pytest.raises(systemone.ValidationFailed) as caught:
        systemone.parse(systemone_body(), limits=Limits(max_questions=2))
    assert locs(caught.value.entries) == [(["body", "questions"], "too_long")]


# ---------------------------------------------------------------- rendering


def decide_with(parsed: systemone.Parsed, distributions: list[list[float]]) -> dict:
    answers = tuple(
        Answer(q, tuple(p), tuple(0.0 for _ in p)) for q, p in zip(parsed.request.questions, distributions, strict=True)
    )
    return systemone.render(Decision("served/model", answers, Usage(input_tokens=640, computed_tokens=1)), parsed)


def test_render_matches_the_contract_example() -> None:
    body = decide_with(systemone.parse(systemone_body()), [[0.03, 0.97], [0.7, 0.1, 0.2], [0.1, 0.1, 0.8]])
    assert body == {
        "model": "served/model",
        "answers": {
            "refund": {"type": "noul", "noul": 0.97},
            "team": {
                "type": "choice",
                "choice": "Billing",
                "confidence": choice_confidence([0.7, 0.1, 0.2]),
                "probabilities": {"Billing": 0.7, "Technical": 0.1, "Sales": 0.2},
            },
            "anger": {
                "type": "score",
                "score": expected_score([0.1, 0.1, 0.8]),
                "confidence": score_confidence([0.1, 0.1, 0.8]),
                "legend": {"0": "Calm", "1": "Frustrated", "2": "Very angry"},
                "probabilities": {"0": 0.1, "1": 0.1, "2": 0.8},
            },
        },
        "usage": {"input_tokens": 640, "output_tokens": 0},
    }
    assert list(body["answers"]) == ["refund", "team", "anger"]
    assert (
        abs(body["answers"]["anger"]["score"] - 1.7) < 1e-9
        and abs(body["answers"]["anger"]["confidence"] - 0.55) < 1e-9
    )


def test_render_echoes_structured_levels_unchanged() -> None:
    levels = ["", {"label": "Mid", "n": 1.5}, ["a"]]
    parsed = systemone.parse(systemone_body(questions={"s": {"type": "score", "criteria": levels}}))
    answer = decide_with(parsed, [[0.2, 0.3, 0.5]])["answers"]["s"]
    assert answer["legend"] == {"0": "", "1": {"label": "Mid", "n": 1.5}, "2": ["a"]}
    assert list(answer["probabilities"]) == ["0", "1", "2"]


def test_single_option_questions_render() -> None:
    parsed = systemone.parse(
        systemone_body(
            questions={
                "c": {"type": "choice", "criteria": {"Only": None}},
                "s": {"type": "score", "criteria": ["Only"]},
            }
        )
    )
    answers = decide_with(parsed, [[1.0], [1.0]])["answers"]
    assert answers["c"] == {"type": "choice", "choice": "Only", "confidence": 1.0, "probabilities": {"Only": 1.0}}
    assert answers["s"] | {"legend": None} == {
        "type": "score",
        "score": 0.0,
        "confidence": 1.0,
        "legend": None,
        "probabilities": {"0": 1.0},
    }


# ---------------------------------------------------------------- HTTP specifics of the route


def multipart(fields: list[tuple[str, str, bytes]], boundary: str = "b0undary") -> tuple[bytes, str]:
    chunks = []
    for name, content_type, data in fields:
        filename = "" if name == "request" else f'; filename="{name}"'
        chunks.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"{filename}\r\n'
            f"Content-Type: {content_type}\r\n\r\n".encode()
            + data
            + b"\r\n"
        )
    return b"".join(chunks) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_http_multipart_reaches_a_vision_decider() -> None:
    decider = FakeDecider(supports_images=True)
    body = asset_body({"<image:0>": {"type": "image", "part": "asset-0"}}, state="Photo: <image:0>")
    data, content_type = multipart(
        [("request", "application/json", json.dumps(body).encode()), ("asset-0", "image/png", png())]
    )
    r = make_app(decider).test_client().post("/v1/systemone", data=data, content_type=content_type)
    assert r.status_code == 200, r.get_json()
    assert decider.calls[-1].input == (Text("Photo: <image:0>\n\nImage reference: <image:0>"), Image(png()))


def test_http_images_on_a_text_only_model(client) -> None:
    r = client.post("/v1/systemone", json=asset_body(ONE_ASSET))
    assert r.status_code == 400
    assert r.get_json()["detail"]["error_type"] == "api_usage_error"


@pytest.mark.parametrize(
    "fields",
    [
        [("asset-0", "image/png", png())],
        [("request", "application/json", b"{not json")],
        [
            (
                "request",
                "application/json",
                json.dumps(asset_body({"<img:1>": {"part": "asset-0"}}, state="<img:1>")).encode(),
            ),
            ("asset-0", "image/png", png()),
            ("asset-1", "image/png", png()),
        ],
    ],
)
def test_http_bad_multipart_is_422(client, fields) -> None:
    data, content_type = multipart(fields)
    r = client.post("/v1/systemone", data=data, content_type=content_type)
    assert r.status_code == 422
    assert r.get_json()["detail"][0]["loc"][0] == "body"


def test_http_truncated_multipart_is_422(client) -> None:
    data, content_type = multipart([("request", "application/json", json.dumps(systemone_body()).encode())])
    r = client.post("/v1/systemone", data=data[:-20], content_type=content_type)
    assert r.status_code == 422


def test_http_other_multipart_types_are_415(client) -> None:
    r = client.post("/v1/systemone", data=b"--x--", content_type="multipart/mixed; boundary=x")
    assert (r.status_code, r.get_json()["detail"]["error_type"]) == (415, "unsupported_media_type")


def test_http_content_type_is_not_trusted_for_json(client) -> None:
    r = client.post("/v1/systemone", data=json.dumps(systemone_body()), content_type="text/plain")
    assert r.status_code == 200


def test_http_strict_models() -> None:
    decider = FakeDecider()
    client = make_app(decider, strict_models=True).test_client()
    r = client.post("/v1/systemone", json=systemone_body(model="jevcompat-no-such-model"))
    assert r.status_code == 400
    assert r.get_json() == {
        "detail": {"error_type": "api_usage_error", "message": "Unknown model: jevcompat-no-such-model"}
    }
    for name in ("jev-latest", decider.model_id):
        r = client.post("/v1/systemone", json=systemone_body(model=name))
        assert (r.status_code, r.get_json()["model"]) == (200, decider.model_id)


def test_http_context_length_is_a_usage_error() -> None:
    r = make_app(FakeDecider(context_chars=50)).test_client().post("/v1/systemone", json=systemone_body())
    assert (r.status_code, r.get_json()["detail"]["error_type"]) == (400, "api_usage_error")
