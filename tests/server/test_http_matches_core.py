"""Answers over HTTP equal `decide.core`'s in-process answers: the wire layer adds nothing to the numbers.

One `gunicorn wsgi:app` on smollm2-135m; the official `openai` SDK (`client.decisions.create`) and
`typesafe_sdk` send the same request, which is also written directly with decide.core's own types
(no wire code) and decided in-process. Renaming, reordering and adding questions over HTTP must
leave every answer where the in-process baseline put it.
"""

from __future__ import annotations

import json

import openai as openai_sdk
import pytest
from conftest import REAL_MODEL_CACHE
from server_process import ServerProcess
from typesafe_sdk import Choice, Noul, RetryPolicy, Score, TypeSafeClient

from decide.answers import Answer
from decide.core import Decider, Question

pytestmark = pytest.mark.smollm

# The server's passes may hold other rows than the core's (a warm prefix, other questions): the BLAS may then sum
# a row's linear layers in another order (measured up to 1.1e-6 on an AMD EPYC with OpenBLAS's Haswell kernels).
TOL = 1e-5
STATE = {
    "subject": "Charged twice",
    "body": "I was charged twice for my March invoice (order #4471) and the refund I was promised never came. "
    "Fix this today or I will dispute the charge with my bank.",
    "attempts": 3,
}
REFUND = "Is the customer asking for money back?"
TEAM = "Which team should handle this ticket?"
TEAMS = {"Billing": "Payments, invoices, refunds", "Technical": None, "Sales": "Pricing and upgrades"}
ANGER = "How frustrated is the customer?"
LEVELS = ["Calm", "Frustrated", "Very angry"]

# The same three questions, in core types (independent of the wire parsers) ...
CORE_QUESTIONS = (
    Question.predicate(REFUND),
    Question.choice(TEAM, list(TEAMS.items())),
    Question.score(ANGER, LEVELS),
)
# ... as OpenAI Decisions questions ...
OPENAI_QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": REFUND},
    {
        "type": "choice",
        "name": "team",
        "instructions": TEAM,
        "choices": [{"value": v} | ({"description": d} if d else {}) for v, d in TEAMS.items()],
    },
    {"type": "score", "name": "anger", "instructions": ANGER, "levels": [{"label": x} for x in LEVELS]},
]
# ... and as System One questions.
SYSTEMONE_QUESTIONS = {
    "refund": Noul(instructions=REFUND),
    "team": Choice(instructions=TEAM, criteria=TEAMS),
    "anger": Score(instructions=ANGER, criteria=LEVELS),
}
OPENAI_EXTRAS = [
    {"type": "predicate", "name": "urgent", "instructions": "Does the customer need an answer today?"},
    {
        "type": "choice",
        "instructions": "What language is it in?",
        "choices": [{"value": "English"}, {"value": "Other"}],
    },
    {
        "type": "score",
        "name": "",
        "instructions": "How polite is it?",
        "levels": [{"label": "Rude"}, {"label": "Polite"}],
    },
]
SYSTEMONE_EXTRAS = {
    "urgent": Noul(instructions="Does the customer need an answer today?"),
    "lang": Choice(instructions="What language is it in?", criteria={"English": None, "Other": None}),
    "polite": Score(instructions="How polite is it?", criteria=["Rude", "Polite"]),
}


@pytest.fixture(scope="module")
def core_answers(smollm) -> tuple[Answer, ...]:
    state_text = json.dumps(STATE, ensure_ascii=False, separators=(",", ":"))
    return Decider(smollm).decide(state_text, CORE_QUESTIONS).answers


@pytest.fixture(scope="module")
def server():
    env = {"DECIDE_MODEL": "smollm2-135m", "DECIDE_CACHE_DIR": str(REAL_MODEL_CACHE), "DECIDE_API_KEY": ""}
    with ServerProcess.start("wsgi:app", env=env) as process:
        yield process


@pytest.fixture(scope="module")
def openai_client(server):
    with openai_sdk.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600) as client:
        yield client


@pytest.fixture(scope="module")
def typesafe_client(server):
    with TypeSafeClient(api_key="unused", base_url=server.url, timeout=600, retry=RetryPolicy(max_retries=0)) as client:
        yield client


def ask_openai(client, questions: list[dict]):
    user = {"role": "user", "content": [{"type": "input_json", "data": STATE}]}
    return client.decisions.create(model="gpt-6-luna", input=[user], questions=questions)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL


def check_openai(answer, core: Answer) -> None:
    assert answer.type == core.kind
    if core.kind == "predicate":
        assert close(answer.probability, core.probability)
        return
    got = [x.probability for x in answer.probabilities]
    assert all(close(g, c) for g, c in zip(got, core.probabilities, strict=True)), (got, core.probabilities)
    assert close(answer.confidence, core.confidence)
    if core.kind == "choice":
        assert answer.choice == core.best.value
    else:
        assert close(answer.score, core.score)


def check_systemone(response, qid: str, core: Answer) -> None:
    if core.kind == "predicate":
        assert close(response.nouls[qid].noul, core.probability)
        return
    answer = response.choices[qid] if core.kind == "choice" else response.scores[qid]
    got = list(answer.probabilities.values())
    assert all(close(g, c) for g, c in zip(got, core.probabilities, strict=True)), (got, core.probabilities)
    assert close(answer.confidence, core.confidence)
    if core.kind == "choice":
        assert answer.choice == core.best.value
    else:
        assert close(answer.score, core.score)


def test_openai_sdk_answers_equal_the_core(openai_client, core_answers) -> None:
    decision = ask_openai(openai_client, OPENAI_QUESTIONS)
    assert decision.model == "smollm2-135m"
    assert [a.name for a in decision.answers] == ["refund", "team", "anger"]
    for answer, core in zip(decision.answers, core_answers, strict=True):
        check_openai(answer, core)


def test_typesafe_sdk_answers_equal_the_core(typesafe_client, core_answers) -> None:
    response = typesafe_client.system_one(state=STATE, questions=SYSTEMONE_QUESTIONS)
    assert list(response.answers) == ["refund", "team", "anger"]
    for qid, core in zip(SYSTEMONE_QUESTIONS, core_answers, strict=True):
        check_systemone(response, qid, core)


def test_openai_renamed_reordered_and_added_questions_keep_their_answers(openai_client, core_answers) -> None:
    renamed = [q | {"name": f"{q['name']} renamed.1"} for q in OPENAI_QUESTIONS]
    renamed[1].pop("name")
    mixed = [OPENAI_EXTRAS[0], renamed[2], OPENAI_EXTRAS[1], renamed[1], renamed[0], OPENAI_EXTRAS[2]]
    answers = ask_openai(openai_client, mixed).answers
    for answer, core in ((answers[4], core_answers[0]), (answers[3], core_answers[1]), (answers[1], core_answers[2])):
        check_openai(answer, core)
    assert [a.name for a in answers] == ["urgent", "anger renamed.1", None, None, "refund renamed.1", ""]


def test_typesafe_renamed_reordered_and_added_questions_keep_their_answers(typesafe_client, core_answers) -> None:
    new_ids = {"refund": "zz-renamed.1", "team": "Q 🙂", "anger": "x y z"}
    renamed = {new_ids[k]: q for k, q in reversed(SYSTEMONE_QUESTIONS.items())}
    extras = list(SYSTEMONE_EXTRAS.items())
    questions = dict([extras[0], *renamed.items(), *extras[1:]])
    response = typesafe_client.system_one(state=STATE, questions=questions)
    assert list(response.answers) == list(questions)
    for old, core in zip(SYSTEMONE_QUESTIONS, core_answers, strict=True):
        check_systemone(response, new_ids[old], core)
