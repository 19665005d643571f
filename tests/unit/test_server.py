"""The Flask server's transport rules (contract §0): headers, JSON errors, zstd, size caps, auth, 429/500."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import time

import pytest
import zstandard
from fake_decider import FakeDecider
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tqdm import tqdm
from wire_samples import JPEG, PNG_URL, make_app, openai_body, png, systemone_body, with_path

from decide.server import ServerConfig, create_app
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
        ("GET", "/no-such-page"),
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
    assert type(health.pop("pid")) is int and (health.pop("queue_depth"), health.pop("running")) == (0, 0)
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
    assert ServerConfig.from_env(env) == ServerConfig(
        api_key="k",
        max_body_bytes=2048,
        strict_models=True,
        aliases=("a", "b"),
        fetch_remote_images=False,
        max_questions=10,
        max_pending=2,
        model="smollm2-135m",
    )
    assert ServerConfig.from_env({"DECIDE_API_KEY": "", "DECIDE_MAX_PENDING": " "}) == ServerConfig()
    serving = {
        "DECIDE_DEADLINE_S": "2.5",
        "DECIDE_BATCH_MAX_TOKENS": "100",
        "DECIDE_ALLOWED_HOSTS": "decide.lan, *.x",
        "DECIDE_PREFIX_CACHE_BYTES": "4096",
        "DECIDE_BACKGROUND_LOAD": "off",
        "DECIDE_BIND": "[::1]:9000",
    }
    config = ServerConfig.from_env(serving)
    assert (config.deadline_s, config.batch_max_tokens, config.allowed_hosts) == (2.5, 100, ("decide.lan", "*.x"))
    assert (config.prefix_cache_bytes, config.background_load, config.bind_host) == (4096, False, "[::1]")
    assert ServerConfig.from_env({"DECIDE_WRITING_WAIT_S": "0"}).writing_wait_s == 0  # never wait for examples
    for bad in (
        {"DECIDE_MAX_BODY_BYTES": "lots"},
        {"DECIDE_STRICT_MODELS": "maybe"},
        {"DECIDE_MAX_PENDING": "0"},
        {"DECIDE_DEADLINE_S": "-1"},
        {"DECIDE_DEADLINE_S": "nan"},
        {"DECIDE_WRITING_WAIT_S": "-1"},
    ):
        with pytest.raises(ValueError):
            ServerConfig.from_env(bad)


# ---------------------------------------------------------------- load and failures


def test_full_queue_is_429_with_retry_after() -> None:
    decider = FakeDecider()
    decider.gate = threading.Event()
    app = make_app(decider, max_pending=1, retry_after_s=2)
    client = app.test_client()
    held = [threading.Thread(target=client.post, args=("/v1/decisions",), kwargs={"json": openai_body()})]
    held[0].start()
    assert decider.entered.wait(10)  # the first request runs (held at the gate); the next one waits
    held.append(threading.Thread(target=client.post, args=("/v1/systemone",), kwargs={"json": systemone_body()}))
    held[1].start()
    while app.extensions["decide"].engine.queue_depth < 1:
        time.sleep(0.01)
    # Other requests: one equal to a queued or running request would follow it instead (test_engine).
    r = client.post("/v1/decisions", json=openai_body(input="A third ticket."))
    assert (r.status_code, r.headers["Retry-After"], r.headers["retry-after-ms"]) == (429, "2", "2000")
    assert openai_error(r) | {"message": ""} == {
        "message": "",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    r = client.post("/v1/systemone", json=systemone_body(state="A fourth ticket."))
    assert (r.status_code, systemone_error(r)["error_type"]) == (429, "rate_limit_error")
    decider.gate.set()
    for t in held:
        t.join(10)
    assert client.post("/v1/systemone", json=systemone_body()).status_code == 200
    assert decider.batches[-2:] == [1, 1]


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


# ---------------------------------------------------------------- readiness


def loading_app(**config):
    """An app whose model load shows a progress bar at 25% and waits for the returned event."""
    release, started = threading.Event(), threading.Event()

    def load() -> FakeDecider:
        with tqdm(total=400, desc="Converting fake", file=io.StringIO()) as bar:
            bar.update(100)
            started.set()
            release.wait(10)
        return FakeDecider()

    app = create_app(ServerConfig(**config), load=load)
    assert started.wait(10)
    return app, release


def test_while_loading_health_says_so_and_routes_are_503() -> None:
    app, release = loading_app(retry_after_s=3)
    client = app.test_client()
    health = client.get("/health")
    assert health.status_code == 200
    body = assert_json_response(health)
    assert body["status"] == "loading" and body["elapsed_s"] >= 0
    assert body["progress"] == {"phase": "Converting fake", "done": 100, "total": 400, "fraction": 0.25}
    r = client.post("/v1/decisions", json=openai_body())
    assert (r.status_code, r.headers["Retry-After"], r.headers["retry-after-ms"]) == (503, "3", "3000")
    assert openai_error(r) | {"message": ""} == {
        "message": "",
        "type": "server_error",
        "param": None,
        "code": "model_loading",
    }
    r = client.post("/v1/systemone", json=systemone_body())
    assert (r.status_code, systemone_error(r)["error_type"], r.headers["Retry-After"]) == (503, "overloaded_error", "3")
    assert client.get("/v1/models").status_code == 503
    release.set()
    while client.get("/health").get_json()["status"] == "loading":
        time.sleep(0.01)
    assert client.get("/health").get_json()["status"] == "ok"
    assert client.post("/v1/systemone", json=systemone_body()).status_code == 200


def test_a_failed_load_is_503_with_the_reason() -> None:
    def load():
        raise FileNotFoundError("/models/missing.gguf: no such file or folder")

    app = create_app(ServerConfig(exit_on_load_error=False), load=load)
    app.extensions["decide"].engine._thread.join(10)
    client = app.test_client()
    health = client.get("/health")
    assert health.status_code == 503 and health.get_json()["status"] == "failed"
    assert "missing.gguf" in health.get_json()["error"]
    r = client.post("/v1/decisions", json=openai_body())
    assert (r.status_code, openai_error(r)["code"]) == (503, "model_load_failed")
    assert "missing.gguf" in openai_error(r)["message"]


def test_without_background_loading_a_bad_model_fails_create_app() -> None:
    def load():
        raise FileNotFoundError("no model here")

    with pytest.raises(FileNotFoundError):
        create_app(ServerConfig(background_load=False), load=load)


# ---------------------------------------------------------------- admission: refused before compute, deadlines


def test_a_request_that_does_not_fit_the_context_is_refused_before_it_queues() -> None:
    decider = FakeDecider(context_chars=50)
    client = make_app(decider).test_client()
    r = client.post("/v1/decisions", json=openai_body())
    assert (r.status_code, openai_error(r)["code"]) == (400, "context_length_exceeded")
    r = client.post("/v1/systemone", json=systemone_body())
    assert (r.status_code, systemone_error(r)["error_type"]) == (400, "api_usage_error")
    assert len(decider.prepared) == 2 and decider.batches == [] and decider.calls == []


def test_the_token_budget_refuses_before_compute() -> None:
    decider = FakeDecider()
    client = make_app(decider, max_request_tokens=20).test_client()
    r = client.post("/v1/decisions", json=openai_body())
    assert (r.status_code, openai_error(r)["code"]) == (400, "token_budget_exceeded")
    r = client.post("/v1/systemone", json=systemone_body())
    assert (r.status_code, systemone_error(r)["error_type"]) == (400, "api_usage_error")
    assert decider.batches == []


def test_a_request_still_queued_at_its_deadline_is_503_and_never_runs() -> None:
    decider = FakeDecider()
    decider.gate = threading.Event()
    app = make_app(decider, deadline_s=0.2)
    client = app.test_client()
    first = threading.Thread(target=client.post, args=("/v1/decisions",), kwargs={"json": openai_body()})
    first.start()
    assert decider.entered.wait(10)
    r = client.post("/v1/systemone", json=systemone_body(state="queued behind a slow one"))
    assert (r.status_code, systemone_error(r)["error_type"], r.headers["Retry-After"]) == (503, "overloaded_error", "1")
    # the OpenAI SDK's own timeout header shortens the deadline further
    r = client.post(
        "/v1/decisions", json=openai_body(input="also queued behind it"), headers={"x-stainless-read-timeout": "0.05"}
    )
    assert (r.status_code, openai_error(r)["code"]) == (503, "queue_timeout")
    decider.gate.set()
    first.join(10)
    assert [c.input for c in decider.calls] == [decider.calls[0].input]
    metrics = app.extensions["decide"].metrics.render().decode()
    assert 'decide_dropped_total{reason="deadline"} 2.0' in metrics


# ---------------------------------------------------------------- hardening: Host, Origin, headers, depth, counts


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "localhost"}, 200),
        ({"Host": "localhost:8000"}, 200),
        ({"Host": "127.0.0.1:8000"}, 200),
        ({"Host": "[::1]:8000"}, 200),
        ({"Host": "10.1.2.3:8000"}, 200),  # an IP literal is never a rebinding attacker's name
        ({"Host": "LOCALHOST."}, 200),
        ({"Host": "decide.lan:8000"}, 200),  # configured
        ({"Host": "evil.example"}, 403),
        ({"Host": "localhost.evil.example:8000"}, 403),
        ({"Host": "127.0.0.1.nip.io"}, 403),
        ({"Origin": "http://localhost:3000"}, 200),
        ({"Origin": "http://127.0.0.1"}, 200),
        ({"Origin": "https://app.example.com"}, 200),  # configured
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Origin": "http://10.1.2.3:8000"}, 403),
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Sec-Fetch-Site": "same-origin"}, 200),
    ],
)
def test_host_and_origin_checks(headers: dict, status: int) -> None:
    client = make_app(allowed_hosts=("decide.lan",), allowed_origins=("https://app.example.com",)).test_client()
    r = client.post("/v1/decisions", json=openai_body(), headers=headers)
    assert r.status_code == status
    if status == 403:
        assert openai_error(r)["code"] in ("host_not_allowed", "origin_not_allowed")
        r = client.post("/v1/systemone", json=systemone_body(), headers=headers)
        assert (r.status_code, systemone_error(r)["error_type"]) == (403, "permission_denied")
        health = client.get("/health", headers=headers)
        if "Sec-Fetch-Site" in headers:  # a cross-site GET (a link someone clicked) reads nothing it could not
            assert health.status_code == 200
        else:
            assert merged_error(health)["error"]["code"] is not None


def test_host_check_allows_the_bind_host_and_a_wildcard() -> None:
    assert (
        make_app(bind="decide.box:8000").test_client().get("/health", headers={"Host": "decide.box"}).status_code == 200
    )
    assert make_app(allowed_hosts=("*",)).test_client().get("/health", headers={"Host": "x.y"}).status_code == 200
    assert (
        make_app(allowed_origins=("*",)).test_client().get("/v1", headers={"Origin": "http://x.y"}).status_code == 200
    )


def test_header_limits_are_431() -> None:
    client = make_app(max_header_bytes=2000, max_headers=20).test_client()
    r = client.post("/v1/decisions", json=openai_body(), headers={"X-Big": "a" * 3000})
    assert (r.status_code, openai_error(r)["code"]) == (431, "request_header_fields_too_large")
    many = {f"X-H{i}": "1" for i in range(25)}
    r = client.post("/v1/systemone", json=systemone_body(), headers=many)
    assert (r.status_code, systemone_error(r)["error_type"]) == (431, "request_header_fields_too_large")
    assert client.post("/v1/decisions", json=openai_body(), headers={"X-Small": "a" * 100}).status_code == 200


def nested(depth: int) -> object:
    value: object = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def test_json_depth_limit() -> None:
    client = make_app(max_json_depth=20).test_client()
    r = client.post("/v1/decisions", json=openai_body(input=[{"role": "user", "content": [
        {"type": "input_json", "data": nested(25)}]}]))  # fmt: skip
    assert r.status_code == 400 and "levels deep" in openai_error(r)["message"]
    r = client.post("/v1/systemone", json=systemone_body(state=nested(30)))
    assert r.status_code == 422 and assert_json_response(r)["detail"][0]["loc"] == ["body"]
    assert client.post("/v1/systemone", json=systemone_body(state=nested(15))).status_code == 200
    # far deeper than Python's parser goes: still a clean 4xx
    deep = b'{"model":"m","state":' + b"[" * 100_000 + b"]" * 100_000 + b',"questions":{}}'
    assert client.post("/v1/systemone", data=deep).status_code == 422
    assert client.post("/v1/decisions", data=deep).status_code == 400


def test_option_and_image_caps() -> None:
    decider = FakeDecider(supports_images=True)
    client = make_app(decider, max_options=3, max_images=1).test_client()
    four = [{"value": v} for v in ("a", "b", "c", "d")]
    r = client.post(
        "/v1/decisions", json=openai_body(questions=[{"type": "choice", "instructions": "?", "choices": four}])
    )
    assert openai_error(r) | {"message": ""} == {
        "message": "",
        "type": "invalid_request_error",
        "param": "questions[0].choices",
        "code": "array_above_max_length",
    }
    body = systemone_body(questions={"q.1": {"type": "score", "criteria": ["a", "b", "c", "d"]}})
    r = client.post("/v1/systemone", json=body)
    entry = assert_json_response(r)["detail"][0]
    assert (r.status_code, entry["loc"], entry["type"]) == (
        422,
        ["body", "questions", "q.1", "score", "criteria"],
        "too_long",
    )
    two = [{"role": "user", "content": [{"type": "input_image", "image_url": PNG_URL}] * 2}]
    r = client.post("/v1/decisions", json=openai_body(input=two))
    assert (r.status_code, openai_error(r)["code"]) == (400, "array_above_max_length")
    one = [{"role": "user", "content": two[0]["content"][:1]}]
    assert client.post("/v1/decisions", json=openai_body(input=one)).status_code == 200


# ---------------------------------------------------------------- observability


def test_access_log_has_the_fields_and_never_the_key(caplog) -> None:
    client = make_app(api_key=KEY).test_client()
    with caplog.at_level(logging.INFO, logger="decide.access"):
        client.post("/v1/decisions", json=openai_body(), headers={"Authorization": f"Bearer {KEY}"})
        client.post("/v1/systemone", json=systemone_body(), headers={"Authorization": "Bearer not-the-key-42"})
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "decide.access"]
    ok, denied = records
    assert set(ok) == {
        "request_id",
        "method",
        "route",
        "status",
        "questions",
        "queue_ms",
        "compute_ms",
        "batch",
        "input_tokens",
        "cached_tokens",
        "duration_ms",
    }
    assert (ok["route"], ok["status"], ok["questions"], ok["batch"]) == ("/v1/decisions", 200, 3, 1)
    assert ok["input_tokens"] > 0 and ok["cached_tokens"] == 0 and REQUEST_ID.fullmatch(ok["request_id"])
    assert (denied["route"], denied["status"]) == ("/v1/systemone", 401)
    assert KEY not in caplog.text and "not-the-key-42" not in caplog.text


def test_metrics_count_requests_tokens_and_batches() -> None:
    app = make_app()
    client = app.test_client()
    client.post("/v1/decisions", json=openai_body())
    client.post("/v1/systemone", json=systemone_body())
    client.post("/v1/systemone", json={})
    client.get("/no/such/route")
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    text = r.get_data(as_text=True)
    for sample in [
        'decide_requests_total{route="/v1/decisions",status="200"} 1.0',
        'decide_requests_total{route="/v1/systemone",status="422"} 1.0',
        'decide_requests_total{route="unmatched",status="404"} 1.0',
        "decide_batch_requests_count 2.0",
        "decide_queue_depth 0.0",
        "decide_queue_limit 32.0",
        "decide_model_ready 1.0",
        "decide_examples_to_write 0.0",
        "decide_waiting_for_examples 0.0",
    ]:
        assert sample in text
    assert re.search(r'^decide_tokens_total\{kind="input"\} [1-9]', text, re.M)
    assert re.search(r"^process_resident_memory_bytes [1-9]", text, re.M)
    assert 'decide_request_duration_seconds_bucket{le="+Inf",route="/v1/decisions"} 1.0' in text


def test_openapi_document_is_served() -> None:
    r = make_app().test_client().get("/openapi.json")
    doc = assert_json_response(r)
    assert doc["openapi"].startswith("3.1") and set(doc["paths"]) == {"/v1/decisions", "/v1/systemone"}


def test_a_lone_surrogate_is_a_4xx_not_a_tokenizer_crash() -> None:
    client = make_app().test_client()
    body = json.dumps(openai_body(input="refund \ud800 me")).encode()
    r = client.post("/v1/decisions", data=body)
    assert r.status_code == 400 and "surrogate" in openai_error(r)["message"]
    body = json.dumps(systemone_body(questions={"\udfff": {"type": "noul"}})).encode()
    assert client.post("/v1/systemone", data=body).status_code == 422
    pair = json.dumps(systemone_body(state="a pair is fine: \U0001f3af")).encode()  # escaped as \ud83c\udfaf
    assert b"\\ud83c\\udfaf" in pair and client.post("/v1/systemone", data=pair).status_code == 200
