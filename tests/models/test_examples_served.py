"""A server does not make a new question's first requests wait minutes for its written examples: it writes them a
step at a time between requests, and a request waits for them only as long as its client does."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx2
import numpy as np
import openai
import pytest
from typesafe_sdk import Choice, RetryPolicy, TypeSafeClient

from decide.core import Decider, DeciderOptions
from decide.quality import examples
from decide.request import DecisionRequest, Question
from decide.server.app import create_app
from decide.server.config import ServerConfig
from decide.wire import openai as openai_wire

STATE = "ticket 7: the app crashes when I pay"
TEAM = Question.choice("Which team?", [("billing", "money"), ("technical", None)])
URGENT = {"type": "predicate", "instructions": "Is it urgent?"}


@pytest.fixture()
def keep_every_example(monkeypatch):
    """A random model answers its own examples alike, so that none would be shown: keep every one written."""
    monkeypatch.setattr(examples, "MAX_TOKENS", 8)
    monkeypatch.setattr(examples, "as_written", lambda q, option, answered: answered is not None)


def library(model, calibration: str, request: DecisionRequest) -> np.ndarray:
    decider = Decider(model, DeciderOptions(calibration=calibration))
    probabilities = decider.decide(request).answers[0].probabilities
    if calibration == "examples":
        assert decider.calibrator.demonstrations(request.questions[0]), "the test needs examples shown"
    return np.log(probabilities)  # the tiny model is sure: compared as logs


def test_a_new_questions_first_answer_comes_without_its_examples_and_later_ones_with_them(
    tiny_qwen2_model, keep_every_example
):
    team = DecisionRequest.of(STATE, [TEAM])
    urgent = openai_wire.parse({"model": "m", "input": STATE, "questions": [URGENT]}).request
    want = {m: library(tiny_qwen2_model, m, team) for m in ("temperature", "examples")}
    want_urgent = library(tiny_qwen2_model, "examples", urgent)
    assert not np.allclose(library(tiny_qwen2_model, "temperature", urgent), want_urgent, atol=0.1)
    assert not np.allclose(want["temperature"], want["examples"], atol=0.1), "the examples must move the answer"

    served = Decider(tiny_qwen2_model, DeciderOptions(calibration="examples"))
    app = create_app(ServerConfig(tune_malloc=False, writing_wait_s=0.0), decider=served)
    transport = httpx2.WSGITransport(app=app)
    typesafe = TypeSafeClient(
        api_key="k", base_url="http://localhost", transport=transport, retry=RetryPolicy(max_retries=0)
    )
    criteria = {"billing": "money", "technical": None}

    def ask_team() -> np.ndarray:
        answer = typesafe.system_one(
            state=STATE, questions={"team": Choice(instructions="Which team?", criteria=criteria)}
        )
        return np.log(list(answer.choices["team"].probabilities.values()))

    # The TypeSafe SDK says nothing of its timeout (10 s): the server's wait, 0 here, applies.
    np.testing.assert_allclose(ask_team(), want["temperature"], atol=1e-3)
    for _ in range(600):  # meanwhile the idle server writes them
        if not served.unwritten_examples([TEAM]):
            break
        time.sleep(0.05)
    np.testing.assert_allclose(ask_team(), want["examples"], atol=1e-3)

    # The OpenAI SDK sends its read timeout (x-stainless-read-timeout): the request waits for the examples.
    with openai.OpenAI(
        api_key="k", base_url="http://localhost/v1", http_client=httpx2.Client(transport=transport)
    ) as oa:
        decision = oa.decisions.create(model="m", input=STATE, questions=[URGENT])
    true = [o.value for o in urgent.questions[0].options].index(True)
    assert np.log(decision.answers[0].probability) == pytest.approx(want_urgent[true], abs=1e-3)
    typesafe.close()


EXITS_WHILE_WRITING = """
import sys
from decide.core import Decider, DeciderOptions
from decide.models import load_model
from decide.quality import examples
from decide.server.app import create_app
from decide.server.config import ServerConfig
from decide.wire import systemone

examples.MAX_TOKENS = 64  # a random model writes to the end: the writing is still going on at exit
loaded = load_model(sys.argv[1], cache_dir=sys.argv[2], progress=False)
decider = Decider(loaded, DeciderOptions(calibration="examples"))
app = create_app(ServerConfig(tune_malloc=False, writing_wait_s=0.0), decider=decider)
team = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "technical": None, "sales": None}}
body = {"model": "m", "state": "It crashes.", "questions": {"t": team}}
answered = app.test_client().post("/v1/systemone", json=body)
question = systemone.parse(body).request.questions[0]
assert answered.status_code == 200 and decider.unwritten_examples([question]) == [question]  # still writing
print("answered", flush=True)
"""


def test_a_process_that_exits_while_its_server_writes_examples_exits_cleanly(tiny_qwen2_gguf_path, tmp_path):
    """The engine thread writes while idle; a process exiting then aborted in C++ ("terminate called without an active
    exception", exit code 134) in most runs, until the engine parked at exit."""
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", EXITS_WHILE_WRITING, str(tiny_qwen2_gguf_path), str(tmp_path / "cache")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0 and "answered" in done.stdout, done.stderr[-2000:]
        assert "terminate called" not in done.stderr
