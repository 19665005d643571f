"""bfloat16 on real clients and the real small model: gunicorn reports the precision that serves,
and SmolLM2-135M's bf16 answers stay close to the float32 reference scorer's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import openai as openai_sdk
import pytest
from server_process import ServerProcess, tiny_model_env
from tiny_model import write_tiny_gguf

from bench import cases
from decide import bf16
from decide.core import Decider, DeciderOptions
from decide.models import load_model

pytestmark = pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")


def test_gunicorn_serves_bf16_and_says_so(tmp_path):
    env = tiny_model_env(tmp_path, DECIDE_PRECISION="bfloat16")
    with ServerProcess.start("wsgi:app", env=env) as server:
        health = server.health()
        assert (health["precision"], health["backend"]) == ("bfloat16", "onednn")
        info = [k for k in server.metrics() if k.startswith("decide_model_info{")]
        assert len(info) == 1 and 'precision="bfloat16"' in info[0] and 'backend="onednn"' in info[0]
        with openai_sdk.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0, timeout=60) as client:
            question = {"type": "predicate", "name": "refund", "instructions": "Is this a refund request?"}
            decision = client.decisions.create(model="tiny", input="I was charged twice.", questions=[question])
        assert len(decision.answers) == 1
        assert "bfloat16 weights through onednn" in server.log_text()


def test_decide_serve_passes_its_precision_to_the_server(tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    env = {"DECIDE_CACHE_DIR": str(tmp_path / "cache"), "DECIDE_API_KEY": "", "DECIDE_PRECISION": "float32"}

    def command(port: int) -> list[str]:
        serve = ["serve", "--model", str(model), "--bind", f"127.0.0.1:{port}", "--precision", "bfloat16"]
        return [sys.executable, "-m", "decide", *serve]

    with ServerProcess.run(command, env=env, cwd=tmp_path) as server:
        assert server.health()["precision"] == "bfloat16"  # the flag wins over the environment


def test_an_unknown_precision_stops_the_server_with_the_reason(tmp_path):
    env = tiny_model_env(tmp_path, DECIDE_PRECISION="fp8")
    with pytest.raises(RuntimeError, match="unknown precision 'fp8'"):
        ServerProcess.start("wsgi:app", env=env, timeout=120).stop()


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DECIDE_CACHE_DIR": str(cache)}
    script = Path(sys.executable).with_name("decide")
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_cli_runs_the_precision_it_is_given(tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    question = ["--noul", "refund=Is this a refund request?", "--choice", "team=billing,technical,sales"]
    args = ["run", "-m", str(model), "-s", "I was charged twice.", *question, "--json"]
    answers = {}
    for precision in ("float32", "bfloat16"):
        result = run_cli(*args, "--precision", precision, cache=tmp_path / "cache")
        assert result.returncode == 0, result.stderr
        assert f"{precision} weights through {'onednn' if precision == 'bfloat16' else 'blas'}" in result.stderr
        answers[precision] = json.loads(result.stdout)["answers"]
    for name in ("refund", "team"):
        assert answers["float32"][name].keys() == answers["bfloat16"][name].keys()
    assert answers["float32"]["refund"]["noul"] == pytest.approx(answers["bfloat16"]["refund"]["noul"], abs=0.02)
    bad = run_cli(*args, "--precision", "fp8", cache=tmp_path / "cache")
    assert bad.returncode == 2 and "invalid choice: 'fp8'" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- SmolLM2-135M

PROB_TOL = 0.05  # bf16 vs float32; measured on these cases: max |Δp| ~0.011 (bench.precision: 500+ questions)
TIE = 0.1  # a best answer may change only where float32's top two are closer than this


@pytest.fixture(scope="module")
def smollm_bf16():
    from conftest import REAL_MODEL_CACHE

    return load_model("smollm2-135m", cache_dir=REAL_MODEL_CACHE, progress=False, precision="bfloat16")


@pytest.mark.smollm
@pytest.mark.parametrize("case", ["standard", "choice40"])
def test_smollm_bf16_is_close_to_the_float32_reference(smollm, smollm_bf16, case):
    request = getattr(cases, case)()
    reference = Decider(smollm, DeciderOptions(scorer="trie")).decide(request)  # exact to the reference scorer
    got = Decider(smollm_bf16).decide(request)
    assert Decider(smollm_bf16).options.scorer == "trie"
    for a, b in zip(got.answers, reference.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=PROB_TOL, rtol=0)
        top_two = np.sort(b.probabilities)[-2:]
        if top_two[1] - top_two[0] > TIE:
            assert a.best.value == b.best.value
