"""Bounded load against the real `gunicorn wsgi:app` on the tiny model (threads on 127.0.0.1).

- 8 clients against a queue of 4: only 200s and 429s; every 200 equals the answer the same body
  gets when it runs alone; the server is normal afterwards.
- Memory: RSS after 1,000 varied requests within 10% of RSS after the first 100.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
import requests
from server_process import ServerProcess, tiny_model_env

CLIENTS = 8
QUEUE = 4
ATTEMPTS_PER_CLIENT = 30
BUDGET_S = 45.0  # the whole load phase stops by then, whatever happens


def ticket(i: int, words: int = 40) -> str:
    rng = random.Random(i)
    vocab = [
        "refund",
        "charge",
        "invoice",
        "crash",
        "login",
        "plan",
        "price",
        "team",
        "angry",
        "thanks",
        "broken",
        "twice",
        "order",
        "bank",
    ]
    return f"Ticket {i}: " + " ".join(rng.choice(vocab) for _ in range(words))


def bodies(n: int) -> list[tuple[str, dict]]:
    """`n` distinct request bodies, alternating the two protocols, 2-3 questions each."""
    out = []
    for i in range(n):
        if i % 2:
            questions = {
                "refund": {"type": "noul", "instructions": "Is this a refund request?"},
                "team": {"type": "choice", "criteria": {"Billing": "money", "Technical": None, "Sales": "plans"}},
            }
            if i % 3:
                questions["anger"] = {"type": "score", "criteria": ["calm", "annoyed", "angry"]}
            out.append(("/v1/systemone", {"model": "jev-latest", "state": ticket(i), "questions": questions}))
        else:
            questions = [
                {"type": "predicate", "name": "refund", "instructions": "Is this a refund request?"},
                {
                    "type": "choice",
                    "name": "team",
                    "instructions": "Which team?",
                    "choices": [{"value": "billing"}, {"value": "technical"}, {"value": "sales"}],
                },  # fmt: skip
            ]
            if i % 3:
                questions.append({"type": "score", "instructions": "How angry?", "levels": [
                    {"label": "calm"}, {"label": "annoyed"}, {"label": "angry"}]})  # fmt: skip
            out.append(("/v1/decisions", {"model": "gpt-6-luna", "input": ticket(i), "questions": questions}))
    return out


def split(value):
    """A JSON value as (its shape with every float replaced by None, the floats in order)."""
    floats: list[float] = []

    def walk(x):
        if isinstance(x, float):
            floats.append(x)
            return None
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(value), floats


def answers(body: dict) -> tuple:
    """A 200 body's answers, checked to be a complete body."""
    assert set(body) == {"model", "answers", "usage"} and body["usage"]["input_tokens"] > 0
    return split(body["answers"])


def close(a: tuple, b: tuple, tol: float = 1e-6) -> bool:
    """Same answers (ids, names, values, order) with every number within `tol`."""
    (shape_a, xs), (shape_b, ys) = a, b
    return shape_a == shape_b and len(xs) == len(ys) and all(abs(x - y) <= tol for x, y in zip(xs, ys))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A server with a queue of 4 and batches of at most 6 questions (two requests)."""
    env = tiny_model_env(tmp_path_factory.mktemp("load"), DECIDE_MAX_PENDING=str(QUEUE), DECIDE_BATCH_MAX_QUESTIONS="6")
    with ServerProcess.start("wsgi:app", env=env) as process:
        yield process


def test_eight_clients_against_a_queue_of_four(loaded) -> None:
    cases = bodies(12)
    with requests.Session() as s:
        solo = [answers(s.post(loaded.url + path, json=body, timeout=60).json()) for path, body in cases]
    statuses: Counter = Counter()
    wrong: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + BUDGET_S

    def client(c: int) -> None:
        with requests.Session() as s:
            for k in range(ATTEMPTS_PER_CLIENT):
                if time.monotonic() > stop_at:
                    return
                i = (c * 7 + k) % len(cases)
                path, body = cases[i]
                r = s.post(loaded.url + path, json=body, timeout=60)
                with lock:
                    statuses[r.status_code] += 1
                if r.status_code == 200 and not close(answers(r.json()), solo[i]):
                    wrong.append(f"{path} case {i}: {r.text[:200]}")
                elif r.status_code == 429:
                    assert r.headers["Retry-After"] == "1" and r.headers["retry-after-ms"] == "1000"
                    time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BUDGET_S + 60)
    print(f"\nload: {dict(statuses)}")
    assert set(statuses) <= {200, 429}, statuses
    assert statuses[200] > 0 and statuses[429] > 0, statuses
    assert wrong == []
    metrics = loaded.metrics()
    assert metrics['decide_rejected_total{reason="queue_full"}'] == statuses[429]
    assert metrics["decide_queue_depth"] == 0 and loaded.health()["status"] == "ok"
    path, body = cases[3]
    after = requests.post(loaded.url + path, json=body, timeout=60)
    assert after.status_code == 200 and close(answers(after.json()), solo[3])


def varied(i: int) -> tuple[str, dict]:
    """Request i of the memory run: a fresh state of varying length, 1-4 questions of every kind."""
    rng = random.Random(1000 + i)
    state = ticket(10_000 + i, words=rng.randint(5, 40))
    n_options = rng.randint(2, 6)
    options = [f"option {i}-{k}" for k in range(n_options)]
    kinds = rng.sample(["noul", "choice", "score"], rng.randint(1, 3))
    if i % 2:
        questions = {}
        for kind in kinds:
            if kind == "noul":
                questions["n"] = {"type": "noul", "instructions": f"Is {i} a refund?"}
            elif kind == "choice":
                questions["c"] = {"type": "choice", "criteria": {o: None for o in options}}
            else:
                questions["s"] = {"type": "score", "criteria": options[:10]}
        return "/v1/systemone", {"model": "jev-latest", "state": state, "questions": questions}
    oa_questions: list[dict] = []
    for kind in kinds:
        if kind == "noul":
            oa_questions.append({"type": "predicate", "instructions": f"Is {i} a refund?"})
        elif kind == "choice":
            oa_questions.append(
                {"type": "choice", "instructions": "Which?", "choices": [{"value": o} for o in options]}
            )
        else:
            oa_questions.append(
                {"type": "score", "instructions": "How much?", "levels": [{"label": o} for o in options]}
            )
    return "/v1/decisions", {"model": "gpt-6-luna", "input": state, "questions": oa_questions}


def test_memory_stays_flat_over_a_thousand_varied_requests(tmp_path) -> None:
    env = tiny_model_env(tmp_path, DECIDE_PREFIX_CACHE_BYTES=str(4 << 20), DECIDE_MLX_CACHE_BYTES=str(16 << 20))
    rss = {}
    with ServerProcess.start("wsgi:app", env=env) as server, requests.Session() as s:
        for i in range(1000):
            path, body = varied(i)
            r = s.post(server.url + path, json=body, timeout=60)
            assert r.status_code == 200, r.text
            if i + 1 in (100, 1000):
                rss[i + 1] = server.metrics()["process_resident_memory_bytes"]
        cache = server.metrics()["decide_prefix_cache_bytes"]
    print(f"\nmemory: RSS after 100 = {rss[100] / 2**20:.1f} MiB, after 1000 = {rss[1000] / 2**20:.1f} MiB")
    assert cache <= 4 << 20
    assert rss[1000] <= 1.10 * rss[100], rss
