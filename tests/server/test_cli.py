"""The `decide` console script, run as a real subprocess on the tiny GGUF model."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_model import write_tiny_gguf

from decide.answers import choice_confidence, expected_score, score_confidence
from decide.cli import BAR_WIDTH, print_answers
from decide.core import Decider
from decide.models import load_model
from decide.wire import systemone

SCRIPT = Path(sys.executable).with_name("decide")
STATE = "I was charged twice for my subscription. Please refund me! Café 🙂"
# Deliberately not in noul/choice/score order: answers must follow the command line.
QUESTIONS = [
    "--score",
    "anger:How angry is the customer?=calm,annoyed,angry",
    "--noul",
    "refund=The customer wants money back",
    "--choice",
    "team=billing,technical,sales",
]
BODY = {
    "model": "jev-latest",
    "state": STATE,
    "questions": {
        "anger": {
            "type": "score",
            "instructions": "How angry is the customer?",
            "criteria": ["calm", "annoyed", "angry"],
        },
        "refund": {"type": "noul", "instructions": "The customer wants money back"},
        "team": {
            "type": "choice",
            "instructions": "team",
            "criteria": {"billing": None, "technical": None, "sales": None},
        },
    },
}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("cli") / "tiny.gguf", seed=3)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "DECIDE_MODEL"}
    return {**environ, "DECIDE_CACHE_DIR": str(tmp_path_factory.mktemp("cli-cache"))}


def decide(env: dict, *args: str, stdin: str | None = None, module: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "decide"] if module else [str(SCRIPT)]
    return subprocess.run(
        [*command, *args], env=env, input=stdin, capture_output=True, text=True, timeout=300, check=False
    )


def run_json(env: dict, model: Path, *extra: str, **kwargs) -> dict:
    result = decide(env, "run", "-m", str(model), *extra, *QUESTIONS, "--json", **kwargs)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_console_script_is_installed():
    assert SCRIPT.is_file(), "pip install -e . installs the `decide` script next to the interpreter"


def test_json_is_the_system_one_response_body(env, model):
    response = run_json(env, model, "-s", STATE)  # logs and progress go to stderr, never into the JSON
    assert list(response) == ["model", "answers", "usage"]
    assert response["model"] == "tiny"
    assert list(response["answers"]) == ["anger", "refund", "team"]
    anger, refund, team = response["answers"].values()
    assert list(refund) == ["type", "noul"] and 0 <= refund["noul"] <= 1
    assert team["type"] == "choice" and list(team["probabilities"]) == ["billing", "technical", "sales"]
    p = list(team["probabilities"].values())
    assert sum(p) == pytest.approx(1, abs=1e-6)
    assert team["probabilities"][team["choice"]] == max(p)
    assert team["confidence"] == pytest.approx(choice_confidence(p), abs=1e-9)
    assert anger["type"] == "score" and anger["legend"] == {"0": "calm", "1": "annoyed", "2": "angry"}
    q = [anger["probabilities"][str(i)] for i in range(3)]
    assert sum(q) == pytest.approx(1, abs=1e-6)
    assert anger["score"] == pytest.approx(expected_score(q), abs=1e-9)
    assert anger["confidence"] == pytest.approx(score_confidence(q), abs=1e-9)
    assert response["usage"]["input_tokens"] > 0 and response["usage"]["output_tokens"] == 0


def test_the_cli_answers_what_the_library_answers(env, model, tmp_path):
    response = run_json(env, model, "-q", "-s", STATE)
    want = systemone.decide(Decider(load_model(str(model), cache_dir=tmp_path, progress=False)), BODY)
    assert response["answers"].keys() == want["answers"].keys()
    for got, expected in zip(response["answers"].values(), want["answers"].values()):
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            assert got[key] == (pytest.approx(value, abs=1e-6) if key != "legend" else value)
    assert response["usage"] == want["usage"]


def test_python_dash_m_reads_the_state_from_stdin(env, model):
    piped = run_json(env, model, "-q", "-s", "-", stdin=STATE, module=True)
    assert piped == run_json(env, model, "-q", "-s", STATE)


def bar_rows(text: str) -> dict[str, tuple[str, float]]:
    """The option rows of the bars output: label -> (bar, probability shown)."""
    rows = [line.split() for line in text.splitlines() if line.startswith("  ")]
    return {label: (bar, float(shown)) for label, bar, shown in rows}


def test_bars_show_each_probability(env, model):
    response = run_json(env, model, "-q", "-s", STATE)
    want = response["answers"]
    result = decide(env, "run", "-q", "-m", str(model), "-s", STATE, *QUESTIONS)
    assert result.returncode == 0, result.stderr
    levels = dict(zip(["calm", "annoyed", "angry"], want["anger"]["probabilities"].values()))
    expected = {
        **levels,
        "false": 1 - want["refund"]["noul"],
        "true": want["refund"]["noul"],
        **want["team"]["probabilities"],
    }
    rows = bar_rows(result.stdout)
    assert list(rows) == list(expected)
    for label, p in expected.items():
        assert rows[label][1] == pytest.approx(p, abs=5e-4)
    headlines = [line for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert [h.split()[0] for h in headlines] == ["anger", "refund", "team", f"({response['usage']['input_tokens']}"]
    assert headlines[2].startswith(f"team (choice): {want['team']['choice']}  confidence")
    assert headlines[-1].endswith("model tiny)")


def test_bar_lengths_follow_the_probabilities():
    response = {
        "model": "m",
        "answers": {
            "ok": {"type": "noul", "noul": 0.25},
            "pick": {"type": "choice", "choice": "b", "confidence": 0.4, "probabilities": {"a": 0.3, "b": 0.7}},
            "lvl": {
                "type": "score",
                "score": 0.5,
                "confidence": 0.0,
                "legend": {"0": "low", "1": "high"},
                "probabilities": {"0": 0.5, "1": 0.5},
            },
        },
        "usage": {"input_tokens": 7, "output_tokens": 0},
    }
    out = io.StringIO()
    print_answers(response, out)
    rows = bar_rows(out.getvalue())
    assert {label: p for label, (_, p) in rows.items()} == {
        "false": 0.75, "true": 0.25, "a": 0.3, "b": 0.7, "low": 0.5, "high": 0.5
    }  # fmt: skip
    for bar, p in rows.values():
        assert len(bar) == BAR_WIDTH and bar.count("\u2588") == round(p * BAR_WIDTH)
    assert "ok (yes/no): P(true) = 0.250" in out.getvalue() and "lvl (score): 0.50  confidence 0.00" in out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--choice", "team="], "--choice team: no options given"),
        (["--choice", "team=billing,,sales"], "empty option"),
        (["--choice", "team=billing,sales,billing"], "'billing' is given twice"),
        (["--score", "s=" + ",".join(map(str, range(11)))], "at most 10 items"),
        (["--noul", "x=yes?", "--choice", "x=a,b"], "two questions are named 'x'"),
        (["--choice", "billing,technical"], "--choice expects NAME=..."),
        ([], "ask at least one question"),
    ],
)
def test_bad_questions_fail_before_loading_the_model(env, args, message):
    # A model that does not exist: these mistakes must be caught before it is looked up.
    result = decide(env, "run", "-m", "no-such-model", "-s", "text", *args)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no-such-model", "unknown model 'no-such-model'"),
        ("/nonexistent/model.gguf", "no such file or folder"),
        ("corrupt.gguf", "is not a readable GGUF file"),
    ],
)
def test_a_model_that_cannot_be_loaded_is_a_clear_error(env, tmp_path, spec, message):
    if spec == "corrupt.gguf":
        spec = str(tmp_path / spec)
        Path(spec).write_bytes(b"not a gguf file")
    result = decide(env, "run", "-q", "-m", spec, "-s", "text", "--noul", "a=Is it?")
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_usage_without_a_command(env):
    result = decide(env)
    assert result.returncode == 2
    assert "usage: decide" in result.stderr and "Traceback" not in result.stderr
    assert decide(env, "--version").stdout.startswith("decide ")
