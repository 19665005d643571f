"""The real `gunicorn wsgi:app`: a killed worker comes back, a bad model stops the server with its
reason, a client that hangs up is never computed, an SDK's retry of a request still computing gets its
answer, keys never reach the logs, errors stay JSON."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
import requests
from server_process import ServerProcess, tiny_model_env
from typesafe_sdk import Noul, RetryPolicy, TypeSafeClient
from wire_samples import openai_body, systemone_body

KEY = "resilience-key-5c1e"
WRONG = "not-the-key-8d2a"


def wait_for(predicate, timeout: float = 60.0, step: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if value := predicate():
            return value
        time.sleep(step)
    raise TimeoutError("the condition did not come true in time")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = tiny_model_env(tmp_path_factory.mktemp("resilience"), DECIDE_API_KEY=KEY, DECIDE_ACCESS_LOG="-")
    with ServerProcess.start("wsgi:app", env=env) as process:
        yield process


def auth(key: str = KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_a_killed_worker_is_replaced_and_serves_again(tmp_path) -> None:
    with ServerProcess.start("wsgi:app", env=tiny_model_env(tmp_path)) as server:
        before = requests.post(server.url + "/v1/systemone", json=systemone_body(), timeout=60)
        old_pid = server.health()["pid"]
        os.kill(old_pid, signal.SIGKILL)
        health = wait_for(lambda: (h := server.health()) and h["status"] == "ok" and h["pid"] != old_pid and h)
        assert health["pid"] != old_pid and server.proc.poll() is None
        after = requests.post(server.url + "/v1/systemone", json=systemone_body(), timeout=60)
        assert (before.status_code, after.status_code) == (200, 200)
        assert after.json()["answers"] == before.json()["answers"]


def test_a_model_that_cannot_load_stops_gunicorn_with_the_reason(tmp_path) -> None:
    env = {"DECIDE_MODEL": str(tmp_path / "missing.gguf"), "DECIDE_CACHE_DIR": str(tmp_path / "cache")}
    with pytest.raises(RuntimeError, match="gunicorn exited") as stopped:
        ServerProcess.start("wsgi:app", env=env, timeout=120)
    assert "the model failed to load" in str(stopped.value) and "missing.gguf" in str(stopped.value)


def test_keys_never_reach_the_log_and_access_lines_are_structured(server) -> None:
    assert (
        requests.post(server.url + "/v1/decisions", json=openai_body(), headers=auth(), timeout=60).status_code == 200
    )
    denied = requests.post(server.url + "/v1/systemone", json=systemone_body(), headers=auth(WRONG), timeout=60)
    assert denied.status_code == 401
    assert requests.get(server.url + "/v1/models", headers={"Authorization": KEY}, timeout=60).status_code == 401
    rid = denied.headers["x-request-id"]
    log = wait_for(lambda: (text := server.log_text()) and rid in text and text)
    assert KEY not in log and WRONG not in log
    lines = [json.loads(line.split("decide.access: ", 1)[1]) for line in log.splitlines() if "decide.access: " in line]
    answered = next(x for x in lines if x["route"] == "/v1/decisions" and x["status"] == 200)
    assert answered["questions"] == 3 and answered["input_tokens"] > 0 and answered["batch"] == 1
    assert {"queue_ms", "compute_ms", "cached_tokens", "duration_ms", "request_id"} <= set(answered)
    assert any(x["request_id"] == rid and x["status"] == 401 for x in lines)


def raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_gunicorn_s_own_errors_are_json(server) -> None:
    huge = b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Huge: " + b"a" * 9000 + b"\r\n\r\n"
    for request, status in [(huge, b"431"), (b"NOT HTTP AT ALL\r\n\r\n", b"400")]:
        head, _, body = raw_exchange(server.port, request).partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == status and b"Content-Type: application/json" in head
        assert b"x-request-id: req_" in head
        parsed = json.loads(body)
        assert set(parsed) == {"error", "detail"}
    assert server.health()["status"] == "ok"


def test_a_client_that_hangs_up_while_queued_is_never_computed(tmp_path: Path) -> None:
    gate = tmp_path / "open"
    with ServerProcess.start("fake_wsgi:app", env={"FAKE_GATE_FILE": str(gate), "DECIDE_API_KEY": ""}) as server:
        held = threading.Thread(
            target=requests.post, args=(server.url + "/v1/decisions",), kwargs={"json": openai_body(), "timeout": 60}
        )
        held.start()
        wait_for(lambda: server.metrics().get("decide_running") == 1)
        body = json.dumps(systemone_body(state="I will not wait")).encode()
        head = f"POST /v1/systemone HTTP/1.1\r\nHost: localhost\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        with socket.create_connection(("127.0.0.1", server.port)) as s:
            s.sendall(head + body)
            wait_for(lambda: server.metrics().get("decide_queue_depth") == 1)
        dropped = 'decide_dropped_total{reason="client_gone"}'
        wait_for(lambda: server.metrics().get(dropped) == 1)
        gate.touch()
        held.join(60)
        after = requests.post(server.url + "/v1/systemone", json=systemone_body(), timeout=60)
        assert after.status_code == 200
        metrics = server.metrics()
        assert metrics["decide_batch_requests_sum"] == 2  # the held request and the last one; never the one that left
        assert metrics[dropped] == 1


def test_an_sdk_retry_of_a_request_still_computing_gets_its_answer(tmp_path: Path) -> None:
    """The TypeSafe SDK gives up on an attempt after its timeout and sends the request again; the
    retry follows the first attempt, still computing, instead of queueing to compute it once more."""
    gate = tmp_path / "open"
    with ServerProcess.start("fake_wsgi:app", env={"FAKE_GATE_FILE": str(gate), "DECIDE_API_KEY": ""}) as server:

        def open_once_the_retry_follows() -> None:
            wait_for(lambda: server.metrics().get("decide_followed_total") == 1)
            gate.touch()

        opener = threading.Thread(target=open_once_the_retry_follows)
        opener.start()
        retry = RetryPolicy(max_retries=3, backoff_initial=0.1, backoff_max=0.2, timeout=None)
        with TypeSafeClient(api_key="unused", base_url=server.url, timeout=1.0, retry=retry) as client:
            answer = client.system_one(state="Refund me, please.", questions={"refund": Noul(instructions="Refund?")})
        opener.join(60)
        assert 0.0 <= answer.nouls["refund"].noul <= 1.0
        metrics = server.metrics()
        assert metrics["decide_followed_total"] == 1
        assert metrics["decide_batch_requests_sum"] == 1  # computed once, for both attempts
