"""`decide eval` / `decide fit` as real subprocesses, and the server applying DECIDE_CALIBRATION / DECIDE_PROFILE."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
from server_process import ServerProcess, tiny_model_env
from tiny_model import write_tiny_gguf

from decide import bf16
from decide.core import Decider, DeciderOptions
from decide.models import load_model
from decide.quality.data import load
from decide.quality.evaluate import evaluate
from decide.wire import systemone

SCRIPT = Path(sys.executable).with_name("decide")
TEAM = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "money", "technical": None}}
URGENT = {"type": "noul", "instructions": "Is it urgent?"}
TOPICS = ["refund", "crash", "invoice", "login", "charge", "error"]


def labelled(n: int) -> str:
    lines = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        labels = {"team": "billing" if topic in ("refund", "invoice", "charge") else "technical", "urgent": i % 3 == 0}
        lines.append(
            json.dumps(
                {"state": f"ticket {i}: {topic}", "questions": {"team": TEAM, "urgent": URGENT}, "labels": labels}
            )
        )
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quality-cli")
    (root / "data.jsonl").write_text(labelled(30))
    return root


@pytest.fixture(scope="module")
def env(root) -> dict[str, str]:
    """The tiny model of the server tests (tiny.gguf, its own cache), no calibration or profile from outside."""
    base = {k: v for k, v in os.environ.items() if k not in ("DECIDE_MODEL", "DECIDE_CALIBRATION", "DECIDE_PROFILE")}
    return {**base, **tiny_model_env(root)}


def decide(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def profile(root, env) -> Path:
    result = decide(env, "fit", str(root / "data.jsonl"), "-o", str(root / "profile"), "-q")
    assert result.returncode == 0, result.stderr
    assert "before / after, 4-fold cross-validated" in result.stdout and "fitted (4-fold)" in result.stdout
    return root / "profile"


def test_eval_prints_every_mode_and_writes_a_reliability_diagram(root, env):
    plot = root / "reliability.png"
    result = decide(env, "eval", str(root / "data.jsonl"), "--compare", "none,contextual,pmi", "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    assert "scoring" in result.stderr  # the progress bar
    for name in ("team", "urgent"):
        block = result.stdout.split(f"\n{name} (")[1]
        assert [m for m in ("none", "contextual", "pmi") if re.search(rf"\n  {m} +[0-9.]+", block)] == [
            "none",
            "contextual",
            "pmi",
        ]
        assert "confusion (none; rows: label, columns: answer)" in block
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_prints_the_numbers_of_the_library(root, env):
    result = decide(env, "eval", str(root / "data.jsonl"), "--compare", "none,contextual", "-q")
    assert result.returncode == 0, result.stderr
    loaded = load_model(env["DECIDE_MODEL"], cache_dir=env["DECIDE_CACHE_DIR"], progress=False)
    table, _ = evaluate(
        Decider(loaded, DeciderOptions(calibration="none")),
        load(root / "data.jsonl"),
        ["none", "contextual"],
        progress=False,
    )
    for name, rows in table.items():
        block = result.stdout.split(f"\n{name} (")[1]
        for mode, (scores, _) in rows.items():
            printed = re.search(rf"\n  {mode} +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9.]+)", block)
            want = [scores.accuracy, scores.macro_f1, scores.brier, scores.log_loss, scores.ece]
            assert [float(x) for x in printed.groups()] == [round(x, 3) for x in want]


@pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")
def test_eval_and_fit_load_the_precision_they_are_given(root, env):
    result = decide(env, "eval", str(root / "data.jsonl"), "--compare", "none", "--precision", "int8")
    assert result.returncode == 0, result.stderr
    assert "int8 weights through onednn" in result.stderr and re.search(r"\n  none +[0-9.]+", result.stdout)
    out = root / "bf16-profile"
    args = ("-o", str(out), "--precision", "bfloat16", "--cv", "2", "--demonstrations", "0")
    result = decide(env, "fit", str(root / "data.jsonl"), *args)
    assert result.returncode == 0, result.stderr
    assert "bfloat16 weights through onednn" in result.stderr and "(0 more shown as demonstrations)" in result.stdout
    body = json.loads((out / "profile.json").read_text())
    assert [q["demonstrations"] for q in body["questions"].values()] == [[], []]


def test_a_fitted_profile_is_evaluated_and_written_with_the_model(root, env, profile):
    body = json.loads((profile / "profile.json").read_text())
    loaded = load_model(env["DECIDE_MODEL"], cache_dir=env["DECIDE_CACHE_DIR"], progress=False)
    assert body["model"] == loaded.model_id
    assert len(body["questions"]) == 2 and len(body["fingerprint"]) == 32
    # 30 labels each: eight of them shown in the prompt (four per answer), the other 22 fitted on.
    for question in body["questions"].values():
        assert sorted(d["option"] for d in question["demonstrations"]) == [0] * 4 + [1] * 4
    result = decide(env, "eval", str(root / "data.jsonl"), "--profile", str(profile), "-q")
    assert result.returncode == 0, result.stderr
    assert re.search(r"\n  profile +[0-9.]+", result.stdout)


def test_malformed_jsonl_is_a_clear_error_with_its_line(root, env):
    bad = root / "bad.jsonl"
    bad.write_text(labelled(2) + '{"state": "x", "questions": {\n')
    result = decide(env, "eval", str(bad))
    assert result.returncode == 2
    assert f"{bad}:3: not valid JSON" in result.stderr and "decide eval --help" in result.stderr


def test_a_profile_of_another_model_is_refused_by_the_cli(root, env, profile):
    other = write_tiny_gguf(root / "other.gguf", seed=4)
    result = decide(env, "eval", str(root / "data.jsonl"), "-m", str(other), "--profile", str(profile), "-q")
    assert result.returncode == 2
    assert "this profile was fitted on model" in result.stderr and "decide fit --model" in result.stderr


def test_an_unknown_mode_says_which_exist(root, env):
    result = decide(env, "eval", str(root / "data.jsonl"), "--compare", "none,magic")
    assert result.returncode == 2 and "none, temperature, contextual, pmi, examples" in result.stderr


@pytest.mark.parametrize("calibration", ["none", "contextual"])
def test_the_server_applies_calibration_and_profile(root, env, profile, calibration):
    """gunicorn with DECIDE_CALIBRATION and DECIDE_PROFILE answers as the library with the same options."""
    body = {
        "model": "jev-latest",
        "state": "ticket 7: my invoice is wrong",
        "questions": {
            "team": TEAM,
            "urgent": URGENT,
            "mood": {"type": "score", "instructions": "Mood?", "criteria": ["calm", "angry"]},
        },
    }
    server_env = {**env, "DECIDE_CALIBRATION": calibration, "DECIDE_PROFILE": str(profile)}
    with ServerProcess.start("wsgi:app", env=server_env) as server:
        got = requests.post(server.url + "/v1/systemone", json=body, timeout=120).json()
    loaded = load_model(env["DECIDE_MODEL"], cache_dir=env["DECIDE_CACHE_DIR"], progress=False)
    decider = Decider(loaded, DeciderOptions(calibration=calibration, profile=profile))
    want = systemone.decide(decider, body)
    plain = systemone.decide(Decider(loaded, DeciderOptions(calibration="none")), body)
    assert list(got["answers"]) == ["team", "urgent", "mood"]
    np.testing.assert_allclose(
        list(got["answers"]["team"]["probabilities"].values()),
        list(want["answers"]["team"]["probabilities"].values()),
        atol=1e-5,
    )
    assert got["answers"]["urgent"]["noul"] == pytest.approx(want["answers"]["urgent"]["noul"], abs=1e-5)
    mood = [list(a["answers"]["mood"]["probabilities"].values()) for a in (got, want, plain)]
    np.testing.assert_allclose(mood[0], mood[1], atol=1e-5)
    # The profile covers team and urgent; mood is calibrated by the setting alone.
    assert np.allclose(mood[0], mood[2], atol=1e-5) == (calibration == "none")


def batch_rows(root: Path, n: int) -> tuple[Path, Path]:
    rows = root / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": f"ticket {i}: my {TOPICS[i % 6]} is wrong"}) + "\n" for i in range(n)))
    questions = root / "questions.json"
    questions.write_text(json.dumps({"questions": {"team": TEAM, "urgent": URGENT}}))
    return rows, questions


def test_batch_answers_with_the_profile_and_calibration_it_is_given(root, env, profile):
    rows, questions = batch_rows(root, 4)
    out = root / "profiled.jsonl"
    args = ("batch", str(rows), "-q", str(questions), "-o", str(out), "--profile", str(profile), "--quiet")
    result = decide(env, *args, "--calibration", "none")
    assert result.returncode == 0, result.stderr
    loaded = load_model(env["DECIDE_MODEL"], cache_dir=env["DECIDE_CACHE_DIR"], progress=False)
    profiled = Decider(loaded, DeciderOptions(calibration="none", profile=profile))
    plain = Decider(loaded, DeciderOptions(calibration="none"))
    for line in out.read_text().splitlines():
        record = json.loads(line)
        body = {"model": "jev-latest", "state": f"ticket {record['row']}: my {TOPICS[record['row'] % 6]} is wrong"}
        body["questions"] = {"team": TEAM, "urgent": URGENT}
        want, without = (systemone.decide(d, body)["answers"]["team"]["probabilities"] for d in (profiled, plain))
        got = record["answers"]["team"]["probabilities"]
        np.testing.assert_allclose(list(got.values()), list(want.values()), atol=1e-5)
        assert not np.allclose(list(got.values()), list(without.values()), atol=1e-3)


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--calibration", "magic"), "unknown calibration"),
        (("--server", "http://127.0.0.1:9", "--precision", "int8"), "--precision set the local model"),
    ],
)
def test_batch_refuses_bad_model_settings_before_reading_rows(root, env, extra, message):
    result = decide(
        env, "batch", str(root / "missing.jsonl"), "-q", "missing.json", "-o", str(root / "x.jsonl"), *extra
    )
    assert result.returncode == 2 and message in result.stderr.lower() and "missing.jsonl" not in result.stderr


def test_batch_refuses_a_profile_of_another_model(root, env, profile):
    other = write_tiny_gguf(root / "other-batch.gguf", seed=4)
    rows, questions = batch_rows(root, 1)
    out = root / "refused.jsonl"
    args = ("batch", str(rows), "-q", str(questions), "-o", str(out), "-m", str(other), "--profile", str(profile))
    result = decide(env, *args)
    assert result.returncode == 2 and "this profile was fitted on model" in result.stderr


@pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")
def test_batch_loads_the_precision_it_is_given(root, env):
    rows, questions = batch_rows(root, 2)
    result = decide(
        env, "batch", str(rows), "-q", str(questions), "-o", str(root / "int8.jsonl"), "--precision", "int8"
    )
    assert result.returncode == 0, result.stderr
    assert "int8 weights through onednn" in result.stderr and "2 rows answered (0 errors)" in result.stderr


def test_run_answers_with_the_profile_it_is_given(env, profile):
    args = ("run", "-s", "ticket 3: my invoice is wrong", "--noul", "urgent=Is it urgent?", "--json", "-q")
    plain = decide(env, *args)
    profiled = decide(env, *args, "--profile", str(profile), "--calibration", "none")
    assert plain.returncode == 0 and profiled.returncode == 0, plain.stderr + profiled.stderr
    loaded = load_model(env["DECIDE_MODEL"], cache_dir=env["DECIDE_CACHE_DIR"], progress=False)
    body = {"model": "jev-latest", "state": "ticket 3: my invoice is wrong", "questions": {"urgent": URGENT}}
    want = systemone.decide(Decider(loaded, DeciderOptions(calibration="none", profile=profile)), body)
    got = json.loads(profiled.stdout)["answers"]["urgent"]["noul"]
    assert got == pytest.approx(want["answers"]["urgent"]["noul"], abs=1e-5)
    assert abs(got - json.loads(plain.stdout)["answers"]["urgent"]["noul"]) > 1e-3


def test_the_server_writes_examples_and_answers_as_the_library(root, env):
    """gunicorn with DECIDE_CALIBRATION=examples, asked by the TypeSafe SDK: the answers of the library with the
    same setting (its examples written and checked), on a tiny model whose greedy text is not empty (qwen2-arch)."""
    from typesafe_sdk import Choice, Noul, RetryPolicy, TypeSafeClient

    model = write_tiny_gguf(root / "tiny-qwen2.gguf", arch="qwen2", seed=1)
    server_env = {**env, "DECIDE_MODEL": str(model), "DECIDE_CALIBRATION": "examples"}
    questions = {"team": Choice(instructions="Which team?", criteria={"billing": "money", "technical": None})}
    questions["urgent"] = Noul(instructions="Is it urgent?")
    with ServerProcess.start("wsgi:app", env=server_env) as server:
        client = TypeSafeClient(api_key="k", base_url=server.url, retry=RetryPolicy(max_retries=0))
        got = [client.system_one(state=f"ticket {i}: my invoice is wrong", questions=questions) for i in (1, 2)]
        client.close()
    loaded = load_model(str(model), cache_dir=env["DECIDE_CACHE_DIR"], progress=False)
    decider = Decider(loaded, DeciderOptions(calibration="examples"))
    body = {"model": "m", "state": "ticket 2: my invoice is wrong", "questions": {"team": TEAM, "urgent": URGENT}}
    want = systemone.decide(decider, body)
    team = list(want["answers"]["team"]["probabilities"].values())
    np.testing.assert_allclose(list(got[1].choices["team"].probabilities.values()), team, atol=1e-5)
    assert got[1].nouls["urgent"].noul == pytest.approx(want["answers"]["urgent"]["noul"], abs=1e-5)
    assert decider.calibrator.unwritten(systemone.parse(body).request.questions) == []
