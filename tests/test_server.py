"""The Flask server's transport rules (contract §0): headers, JSON errors, zstd, size caps, auth, 429/500."""

from __future__ import annotations

import json
import re

import pytest
import zstandard
from fake_decider import FakeDecider
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_samples import JPEG, make_app, openai_body, png, systemone_body, with_path

from decide.server import ServerConfig
from decide.server.errors import dumps

REQUEST_ID = re.compile(r"req_[0-9a-f]{32}")
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def client():
    return make_app().test_client()


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def assert_json_response(r) -> dict:
    assert r.headers["Content-Type"] == "application/json"
    assert REQUEST_ID.fullmatch(r.headers["x-request-id"])
    assert r.headers["x-typesafe-request-id"] == r.headers["x-request-id"]
    return json.loads(r.data)


def openai_error(r) -> dict:
    body = assert_json_response(r)
    assert list(body) == ["error"] and list(body["error"]) == ["message", "type", "param", "code"]
    return body["error"]


def systemone_error(r) -> dict:
    body = assert_json_response(r)
    assert list(body) == ["detail"] and list(body["detail"]) == ["error_type", "message"]
    return body["detail"]


def merged_error(r) -> dict:
    body = assert_json_response(r)
    assert set(body) == {"error", "detail"} and isinstance(body["error"]["message"], str)
    return body


# ---------------------------------------------------------------- headers and JSON everywhere


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/decisions", openai_body(), 200),
        ("POST", "/v1/systemone", systemone_body(), 200),
        ("GET", "/v1/models", None, 200),
        ("GET", "/v1", None, 200),
        ("GET", "/health", None, 200),
        ("POST", "/v1/decisions", {"model": 1}, 400),
        ("POST", "/v1/systemone", {"model": 1}, 422),
        ("GET", "/nope", None, 404),
        ("GET", "/v1/decisions", None, 405),
        ("DELETE", "/v1/models", None, 405),
        ("OPTIONS", "/v1/systemone", None, 405),
    ],
)
def test_every_response_is_json_with_request_ids(client, method, path, body, status) -> None:
    r = client.open(path, method=method, json=body)
    assert r.status_code == status
    assert_json_response(r)


def test_request_ids_are_fresh(client) -> None:
    ids = {client.get("/health").headers["x-request-id"] for _ in range(5)}
    assert len(ids) == 5


def test_404_is_the_merged_body_on_every_unknown_path(client) -> None:
    for method, path in [
        ("GET", "/"),
        ("POST", "/v1/decisions/"),
        ("GET", "/v1/jevcompat-no-such-route"),
        ("POST", "/v2/systemone"),
    ]:
        r = client.open(path, method=method, json={})
        assert r.status_code == 404
        body = merged_error(r)
        assert body["detail"]["error_type"] == "not_found" and body["error"]["type"] == "invalid_request_error"


def test_405_shapes(client) -> None:
    r = client.get("/v1/decisions")
    assert (r.status_code, r.headers["Allow"]) == (405, "POST")
    assert openai_error(r)["type"] == "invalid_request_error"
    r = client.get("/v1/systemone")
    assert (r.status_code, systemone_error(r)["error_type"]) == (405, "method_not_allowed")
    r = client.post("/v1/models")
    assert r.status_code == 405 and "GET" in r.headers["Allow"]
    assert merged_error(r)["detail"]["error_type"] == "method_not_allowed"


def test_key_order_is_the_request_order(client) -> None:
    body = systemone_body()
    body["questions"] = {"zeta": body["questions"]["anger"], "alpha": body["questions"]["refund"]}
    r = client.post("/v1/systemone", json=body)
    assert list(r.get_json()["answers"]) == ["zeta", "alpha"]
    assert r.data.index(b'"zeta"') < r.data.index(b'"alpha"')
    assert list(json.loads(r.data)["answers"]["zeta"]) == ["type", "score", "confidence", "legend", "probabilities"]


def test_same_body_same_bytes(client) -> None:
    a = client.post("/v1/decisions", json=openai_body()).data
    b = client.post("/v1/decisions", json=openai_body()).data
    assert a == b
    usage = json.loads(a)["usage"]
    assert all(type(v) is int for v in (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]))


def test_models_body(client) -> None:
    body = assert_json_response(client.get("/v1/models"))
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["fake/decider-1", "gpt-6-luna", "jev-latest"]
    assert all(
        m["object"] == "model" and type(m["created"]) is int and isinstance(m["owned_by"], str) for m in body["data"]
    )
    assert [m["name"] for m in body["models"]] == ["fake/decider-1", "jev-latest"]
    for m in body["models"]:
        assert set(m) == {"name", "description", "release_date"} and all(isinstance(v, str) for v in m.values())
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", m["release_date"])


def test_models_lists_aliases() -> None:
    body = make_app(aliases=("house",)).test_client().get("/v1/models").get_json()
    assert [m["id"] for m in body["data"]][-1] == "house" and [m["name"] for m in body["models"]][-1] == "house"


def test_index_and_health(client) -> None:
    index = assert_json_response(client.get("/v1"))
    assert {(r["method"], r["path"]) for r in index["data"]} >= {
        ("POST", "/v1/decisions"),
        ("POST", "/v1/systemone"),
        ("GET", "/v1/models"),
    }
    health = assert_json_response(client.get("/health"))
    assert health | {"context_length": 0} == {
        "status": "ok",
        "model": "fake/decider-1",
        "device": "cpu",
        "dtype": "float32",
        "blas": "none",
        "context_length": 0,
        "supports_images": False,
    }


def test_dumps_never_writes_non_finite_numbers() -> None:
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})
    assert dumps({"é": 1.0, "k": [True, None]}) == '{"é":1.0,"k":[true,null]}'


# ---------------------------------------------------------------- bodies: encodings and caps


@pytest.mark.parametrize("encoding", ["zstd", "ZSTD", " zstd ", "identity, zstd", "zstd, identity"])
def test_zstd_bodies(client, encoding) -> None:
    for path, body in [("/v1/decisions", openai_body()), ("/v1/systemone", systemone_body())]:
        r = client.post(
            path,
            data=zstd(json.dumps(body).encode()),
            headers={"Content-Encoding": encoding},
            content_type="application/json",
        )
        assert r.status_code == 200, r.data


def test_zstd_multi_frame_body(client) -> None:
    raw = json.dumps(systemone_body()).encode()
    r = client.post("/v1/systemone", data=zstd(raw[:50]) + zstd(raw[50:]), headers={"Content-Encoding": "zstd"})
    assert r.status_code == 200


def test_zstd_multipart_body() -> None:
    decider = FakeDecider(supports_images=True)
    body = systemone_body(
        state="<image:0> and <image:1>",
        assets={"<image:0>": {"type": "image", "part": "asset-0"}, "<image:1>": {"type": "image", "part": "asset-1"}},
    )
    parts = [
        ("request", "application/json", json.dumps(body).encode()),
        ("asset-0", "image/png", png()),
        ("asset-1", "application/octet-stream", JPEG),
    ]
    raw = (
        b"".join(
            f'--XyZ\r\nContent-Disposition: form-data; name="{n}"; filename="{n}"\r\nContent-Type: {t}\r\n\r\n'.encode()
            + d
            + b"\r\n"
            for n, t, d in parts
        )
        + b"--XyZ--\r\n"
    )
    r = (
        make_app(decider)
        .test_client()
        .post(
            "/v1/systemone",
            data=zstd(raw),
            headers={"Content-Encoding": "zstd"},
            content_type="multipart/form-data; boundary=XyZ",
        )
    )
    assert r.status_code == 200, r.data
    assert len(decider.calls[-1].images) == 2


def test_zstd_bomb_is_413() -> None:
    client = make_app(max_body_bytes=100_000).test_client()
    bomb = zstd(b"{" + b" " * 5_000_000 + b"}")
    assert len(bomb) < 1000
    r = client.post("/v1/decisions", data=bomb, headers={"Content-Encoding": "zstd"})
    assert (r.status_code, openai_error(r)["code"]) == (413, "request_too_large")
    r = client.post("/v1/systemone", data=bomb, headers={"Content-Encoding": "zstd"})
    assert (r.status_code, systemone_error(r)["error_type"]) == (413, "request_too_large")


def test_body_over_the_cap_is_413() -> None:
    client = make_app(max_body_bytes=1000).test_client()
    big = openai_body(input="x" * 2000)
    r = client.post("/v1/decisions", json=big)
    assert (r.status_code, openai_error(r)["code"]) == (413, "request_too_large")
    r = client.post("/v1/systemone", json=systemone_body(state="x" * 2000))
    assert (r.status_code, systemone_error(r)["error_type"]) == (413, "request_too_large")
    assert client.post("/v1/decisions", json=openai_body()).status_code == 200


def test_broken_zstd(client) -> None:
    r = client.post("/v1/decisions", data=b"\x28\xb5\x2f\xfd garbage", headers={"Content-Encoding": "zstd"})
    assert (r.status_code, openai_error(r)["code"]) == (400, None)
    r = client.post("/v1/systemone", data=b"not zstd at all", headers={"Content-Encoding": "zstd"})
    assert r.status_code == 422


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd, gzip", "deflate"])
def test_other_encodings_are_415(client, encoding) -> None:
    r = client.post("/v1/decisions", data=b"{}", headers={"Content-Encoding": encoding})
    assert (r.status_code, openai_error(r)["code"]) == (415, "unsupported_content_encoding")
    r = client.post("/v1/systemone", data=b"{}", headers={"Content-Encoding": encoding})
    assert (r.status_code, systemone_error(r)["error_type"]) == (415, "unsupported_media_type")


# ---------------------------------------------------------------- auth


@pytest.mark.parametrize("header", [None, "Bearer jevcompat-no-key", "Bearer ", "Basic dXNlcjpwYXNz", "garbage"])
def test_auth_off_ignores_the_header(client, header) -> None:
    headers = {"Authorization": header} if header is not None else {}
    assert client.post("/v1/decisions", json=openai_body(), headers=headers).status_code == 200
    assert client.post("/v1/systemone", json=systemone_body(), headers=headers).status_code == 200
    assert client.get("/v1/models", headers=headers).status_code == 200


@pytest.fixture(scope="module")
def locked():
    return make_app(api_key=KEY).test_client()


AUTH_CASES = [
    # header, openai (status, code), systemone status, merged (status, code)
    (None, (401, None), 403, (401, None)),
    ("", (401, None), 403, (401, None)),
    ("Basic " + KEY, (401, None), 403, (401, None)),
    ("Bearer", (401, None), 403, (401, None)),
    ("Bearer wrong-key", (401, "invalid_api_key"), 401, (401, "invalid_api_key")),
    ("Bearer " + KEY + "x", (401, "invalid_api_key"), 401, (401, "invalid_api_key")),
]


@pytest.mark.parametrize(("header", "oa", "s1", "merged"), AUTH_CASES)
def test_auth_on_rejects(locked, header, oa, s1, merged) -> None:
    headers = {"Authorization": header} if header is not None else {}
    r = locked.post("/v1/decisions", json=openai_body(), headers=headers)
    assert (r.status_code, openai_error(r)["code"]) == oa
    r = locked.post("/v1/systemone", json=systemone_body(), headers=headers)
    assert (r.status_code, systemone_error(r)["error_type"]) == (s1, "authentication_error")
    r = locked.get("/v1/models", headers=headers)
    assert (r.status_code, merged_error(r)["error"]["code"]) == merged
    assert r.get_json()["detail"]["error_type"] == "authentication_error"


def test_auth_on_accepts_the_bearer_key_only(locked) -> None:
    good = {"Authorization": f"Bearer {KEY}"}
    assert locked.post("/v1/decisions", json=openai_body(), headers=good).status_code == 200
    assert locked.post("/v1/systemone", json=systemone_body(), headers=good).status_code == 200
    assert locked.get("/v1/models", headers=good).status_code == 200
    assert locked.get("/v1", headers=good).status_code == 200
    assert locked.post("/v1/systemone", json=systemone_body(), headers={"x-api-key": KEY}).status_code == 403
    assert locked.get("/health").status_code == 200
    assert locked.get("/v1/nothing-here").status_code == 404


def test_key_is_checked_before_the_body(locked) -> None:
    bad = {"Authorization": "Bearer nope"}
    assert locked.post("/v1/decisions", data=b"{not json", headers=bad).status_code == 401
    assert locked.post("/v1/systemone", data=b"x" * 10, headers={**bad, "Content-Encoding": "gzip"}).status_code == 401


def test_config_from_env() -> None:
    env = {
        "DECIDE_API_KEY": "k",
        "DECIDE_MAX_BODY_BYTES": "2048",
        "DECIDE_STRICT_MODELS": "yes",
        "DECIDE_MODEL_ALIASES": "a, b,,",
        "DECIDE_FETCH_REMOTE_IMAGES": "0",
        "DECIDE_MAX_QUESTIONS": "10",
        "DECIDE_MAX_PENDING": "2",
        "DECIDE_MODEL": "smollm2-135m",
    }
    assert ServerConfig.from_env(env) == ServerConfig("k", 2048, True, ("a", "b"), False, 10, 2, "smollm2-135m")
    assert ServerConfig.from_env({"DECIDE_API_KEY": ""}) == ServerConfig()
    for bad in ({"DECIDE_MAX_BODY_BYTES": "lots"}, {"DECIDE_STRICT_MODELS": "maybe"}, {"DECIDE_MAX_PENDING": "0"}):
        with pytest.raises(ValueError):
            ServerConfig.from_env(bad)


# ---------------------------------------------------------------- load and failures


def test_full_queue_is_429_with_retry_after() -> None:
    app = make_app(max_pending=1)
    app.extensions["decide"].admission.acquire()
    client = app.test_client()
    r = client.post("/v1/decisions", json=openai_body())
    assert (r.status_code, r.headers["Retry-After"], r.headers["retry-after-ms"]) == (429, "1", "1000")
    assert openai_error(r) | {"message": ""} == {
        "message": "",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    r = client.post("/v1/systemone", json=systemone_body())
    assert (r.status_code, systemone_error(r)["error_type"]) == (429, "rate_limit_error")
    app.extensions["decide"].admission.release()
    assert client.post("/v1/systemone", json=systemone_body()).status_code == 200


def test_a_failing_model_is_500_and_the_server_keeps_serving() -> None:
    decider = FakeDecider()
    client = make_app(decider).test_client()
    decider.fail_with = RuntimeError("metal exploded")
    r = client.post("/v1/decisions", json=openai_body())
    assert (r.status_code, openai_error(r)) == (
        500,
        {"message": openai_error(r)["message"], "type": "server_error", "param": None, "code": None},
    )
    assert "metal" not in r.get_data(as_text=True)
    decider.fail_with = MemoryError()
    r = client.post("/v1/systemone", json=systemone_body())
    assert (r.status_code, systemone_error(r)["error_type"]) == (500, "internal_error")
    assert client.post("/v1/decisions", json=openai_body()).status_code == 200


def test_a_broken_distribution_is_500_never_nan() -> None:
    decider = FakeDecider()
    decider.bad_probabilities = [float("nan"), float("nan"), float("nan")]
    client = make_app(decider).test_client()
    body = openai_body(questions=[openai_body()["questions"][1]])
    r = client.post("/v1/decisions", json=body)
    assert r.status_code == 500 and b"NaN" not in r.data
    r = client.post("/v1/systemone", json=systemone_body(questions={"t": systemone_body()["questions"]["team"]}))
    assert r.status_code == 500 and b"NaN" not in r.data


# ---------------------------------------------------------------- no 5xx for any client mistake

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


def paths(value, prefix=()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


ROUTES = {"/v1/decisions": openai_body(), "/v1/systemone": systemone_body()}
FUZZ_CLIENT = make_app().test_client()
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_no_5xx(path: str, data: bytes, headers: dict | None = None) -> None:
    r = FUZZ_CLIENT.post(path, data=data, headers=headers or {}, content_type="application/json")
    assert r.status_code < 500, r.data
    body = assert_json_response(r)
    if r.status_code == 200:
        assert set(body) == {"model", "answers", "usage"}


@FUZZ
@given(path=st.sampled_from(sorted(ROUTES)), data=st.data(), value=JSON)
def test_mutated_valid_bodies_never_5xx(path: str, data, value) -> None:
    body = ROUTES[path]
    where = data.draw(st.sampled_from(paths(body)))
    assert_no_5xx(path, json.dumps(with_path(body, where, value)).encode())


@FUZZ
@given(path=st.sampled_from(sorted(ROUTES)), value=JSON)
def test_random_json_never_5xx(path: str, value) -> None:
    assert_no_5xx(path, json.dumps(value).encode())


@FUZZ
@given(path=st.sampled_from(sorted(ROUTES)), raw=st.binary(max_size=300), zstd_it=st.booleans())
def test_random_bytes_never_5xx(path: str, raw: bytes, zstd_it: bool) -> None:
    if zstd_it:
        assert_no_5xx(path, zstd(raw), {"Content-Encoding": "zstd"})
    else:
        assert_no_5xx(path, raw)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["model", "state", "questions", "assets", "input"]), JSON, max_size=5))
def test_random_top_level_fields_never_5xx(fields: dict) -> None:
    for path in ROUTES:
        assert_no_5xx(path, json.dumps(fields).encode())
