"""Thousands of hostile bodies against the real `gunicorn wsgi:app` on the tiny model, both routes:
malformed, truncated, oversized, wrongly encoded, deeply nested. Never a 5xx, never a dead worker,
and a valid request still gets its answer afterwards."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import requests
import zstandard
from server_process import ServerProcess, tiny_model_env
from wire_samples import openai_body, systemone_body

CAP = 64 * 1024  # the server's body cap in this module: oversized bodies stay cheap
PER_KIND = 350
SEED = 20261203

VALID = {"/v1/decisions": openai_body(), "/v1/systemone": systemone_body()}
Case = tuple[str, bytes, dict]  # route, body, headers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = tiny_model_env(tmp_path_factory.mktemp("fuzz"), DECIDE_MAX_BODY_BYTES=str(CAP))
    with ServerProcess.start("wsgi:app", env=env) as process:
        yield process


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def raw(route: str) -> bytes:
    return json.dumps(VALID[route], ensure_ascii=False).encode()


def random_json(rng: random.Random, depth: int = 0):
    pick = rng.randrange(9 if depth < 4 else 6)
    return [
        lambda: None,
        lambda: rng.choice([True, False]),
        lambda: rng.randint(-(2**70), 2**70),
        lambda: rng.uniform(-1e300, 1e300),
        lambda: "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(12))),
        lambda: rng.choice(["", "noul", "choice", "score", "box", "predicate", "user", "input_text", "🎯"]),
        lambda: [random_json(rng, depth + 1) for _ in range(rng.randrange(4))],
        lambda: {rng.choice(["type", "model", "state", "x"]): random_json(rng, depth + 1) for _ in range(3)},
        lambda: {"type": rng.choice(["choice", "score"]), "criteria": random_json(rng, depth + 1)},
    ][pick]()


def subtree_paths(value, prefix=()) -> list[tuple]:
    out = [prefix] if prefix else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for k, v in items:
        out += subtree_paths(v, (*prefix, k))
    return out


def replaced(body: dict, path: tuple, value) -> dict:
    out = json.loads(json.dumps(body))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def truncated(rng: random.Random, route: str) -> Case:
    data = raw(route)
    return route, data[: rng.randrange(len(data))], {}


def mutated_bytes(rng: random.Random, route: str) -> Case:
    data = bytearray(raw(route))
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data))
        op = rng.randrange(3)
        if op == 0:
            data[at] = rng.randrange(256)
        elif op == 1:
            data.insert(at, rng.choice(b'{}[]",:\\\x00\xff\xc3'))
        else:
            del data[at]
    return route, bytes(data), {}


def mutated_tree(rng: random.Random, route: str) -> Case:
    body = VALID[route]
    path = rng.choice(subtree_paths(body))
    return route, json.dumps(replaced(body, path, random_json(rng))).encode(), {}


def wrong_encoding(rng: random.Random, route: str) -> Case:
    text = json.dumps(VALID[route], ensure_ascii=False).replace("refund", "réfund ✓")
    choice = rng.randrange(6)
    if choice == 0:
        return route, text.encode("utf-16"), {}
    if choice == 1:
        return route, text.encode("latin-1", errors="replace"), {}
    if choice == 2:
        return route, b"\xef\xbb\xbf" + text.encode(), {}
    if choice == 3:
        data = bytearray(text.encode())
        data.insert(rng.randrange(len(data)), rng.choice([0x80, 0xC0, 0xED, 0xF5, 0xFF]))
        return route, bytes(data), {}
    if choice == 4:
        return route, text.encode(), {"Content-Type": rng.choice(["text/plain", "application/xml", "multipart/mixed"])}
    surrogate = text.replace("✓", "\\ud800")
    return route, surrogate.encode(), {}


def content_encoding(rng: random.Random, route: str) -> Case:
    data = raw(route)
    choice = rng.randrange(6)
    if choice == 0:
        return route, data, {"Content-Encoding": "zstd"}  # a lie: the body is plain
    if choice == 1:
        return route, zstd(data), {}  # compressed, undeclared
    if choice == 2:
        packed = zstd(data)
        return route, packed[: rng.randrange(1, len(packed))], {"Content-Encoding": "zstd"}
    if choice == 3:
        return route, data, {"Content-Encoding": rng.choice(["gzip", "br", "compress", "zstd, br", "x" * 300])}
    if choice == 4:
        return route, zstd(b"[" * rng.randint(CAP + 1, 4 * CAP)), {"Content-Encoding": "zstd"}  # a bomb
    return route, zstd(zstd(data)), {"Content-Encoding": "zstd, zstd"}


def oversized(rng: random.Random, route: str) -> Case:
    filler = "x" * rng.randint(CAP, 2 * CAP)
    body = replaced(VALID[route], ("state",) if route == "/v1/systemone" else ("input",), filler)
    return route, json.dumps(body).encode(), {}


def deeply_nested(rng: random.Random, route: str) -> Case:
    depth = rng.choice([70, 101, 500, 999, 1001, 5000, 30_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
    closed = rng.random() < 0.7
    nest = opener * depth + b"1" + (closer * depth if closed else b"")
    key = b"state" if route == "/v1/systemone" else b"input"
    wrapped = rng.random() < 0.5
    if wrapped:
        prefix = b'{"model":"m","questions":{"q":{"type":"noul"}},"' + key + b'":'
        return route, prefix + nest + b"}", {}
    return route, nest, {}


def numbers_and_strings(rng: random.Random, route: str) -> Case:
    weird = rng.choice(
        ["1e999", "-1e999", "NaN", "Infinity", "1" * 5000, "-0", "0.1e-400", '"\\u0000"', '"' + "é" * 300 + '"']
    )
    text = json.dumps(VALID[route])
    target = '"Is this a refund request?"' if route == "/v1/decisions" else '"Is the customer asking for money back?"'
    return route, text.replace(target, weird).encode(), {}


def multipart(rng: random.Random, route: str) -> Case:
    boundary = rng.choice(["XyZ", "", "a" * 80, "é", "--"])
    parts = [(b"request", raw("/v1/systemone")), (b"asset-0", bytes(rng.randrange(256) for _ in range(40)))]
    body = b"".join(
        b"--" + boundary.encode() + b'\r\nContent-Disposition: form-data; name="' + n + b'"\r\n\r\n' + d + b"\r\n"
        for n, d in parts[: rng.randint(0, 2)]
    )
    if rng.random() < 0.6:
        body += b"--" + boundary.encode() + b"--\r\n"
    body = body[: rng.randrange(len(body) + 1)] if rng.random() < 0.3 else body
    return "/v1/systemone", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


KINDS: list[Callable[[random.Random, str], Case]] = [
    truncated,
    mutated_bytes,
    mutated_tree,
    wrong_encoding,
    content_encoding,
    oversized,
    deeply_nested,
    numbers_and_strings,
    multipart,
]


def cases() -> Iterator[tuple[str, Case]]:
    rng = random.Random(SEED)
    for kind in KINDS:
        for i in range(PER_KIND):
            route = "/v1/decisions" if i % 2 else "/v1/systemone"
            yield kind.__name__, kind(rng, route)


def test_hostile_bodies_never_get_a_5xx(server) -> None:
    worker = server.health()["pid"]
    all_cases = list(cases())
    failures: list[str] = []
    seen: Counter = Counter()
    lock = threading.Lock()

    def send(chunk: list[tuple[str, Case]]) -> None:
        with requests.Session() as s:
            for kind, (route, body, headers) in chunk:
                r = s.post(server.url + route, data=body, headers=headers, timeout=120)
                ok = r.status_code < 500 and r.headers.get("Content-Type") == "application/json"
                ok = ok and r.headers.get("x-request-id", "").startswith("req_") and isinstance(r.json(), dict)
                with lock:
                    seen[(kind, r.status_code)] += 1
                    if not ok:
                        failures.append(f"{kind} {route} {r.status_code}: {r.text[:300]!r} for {body[:120]!r}")

    threads = [threading.Thread(target=send, args=(all_cases[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    statuses = Counter()
    for (_, status), n in seen.items():
        statuses[status] += n
    print(f"\nfuzz: {len(all_cases)} bodies, statuses {dict(sorted(statuses.items()))}")
    assert failures == []
    assert sum(statuses.values()) == len(all_cases) >= 3000
    assert {400, 413, 415, 422} <= set(statuses)
    health = server.health()
    assert (health["status"], health["pid"]) == ("ok", worker)  # the worker never died
    for route, body in VALID.items():
        r = requests.post(server.url + route, json=body, timeout=60)
        assert r.status_code == 200 and set(r.json()) == {"model", "answers", "usage"}
