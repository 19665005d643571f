"""bfloat16 and int8 on real clients and the real small model: gunicorn reports the precision that
serves, and SmolLM2-135M's answers in both stay close to the float32 reference scorer's."""

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


@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
def test_gunicorn_serves_a_onednn_precision_and_says_so(tmp_path, precision):
    env = tiny_model_env(tmp_path, DECIDE_PRECISION=precision)
    with ServerProcess.start("wsgi:app", env=env) as server:
        health = server.health()
        assert (health["precision"], health["backend"]) == (precision, "onednn")
        info = [k for k in server.metrics() if k.startswith("decide_model_info{")]
        assert len(info) == 1 and f'precision="{precision}"' in info[0] and 'backend="onednn"' in info[0]
        with openai_sdk.OpenAI(base_url=server.url + "/v1", api_key="-", max_retries=0, timeout=60) as client:
            question = {"type": "predicate", "name": "refund", "instructions": "Is this a refund request?"}
            decision = client.decisions.create(model="tiny", input="I was charged twice.", questions=[question])
        assert len(decision.answers) == 1
        assert f"{precision} weights through onednn" in server.log_text()


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
    for precision in ("float32", "bfloat16", "int8"):
        result = run_cli(*args, "--precision", precision, cache=tmp_path / "cache")
        assert result.returncode == 0, result.stderr
        assert f"{precision} weights through {'blas' if precision == 'float32' else 'onednn'}" in result.stderr
        answers[precision] = json.loads(result.stdout)["answers"]
    for name in ("refund", "team"):
        assert answers["float32"][name].keys() == answers["bfloat16"][name].keys() == answers["int8"][name].keys()
    assert answers["float32"]["refund"]["noul"] == pytest.approx(answers["bfloat16"]["refund"]["noul"], abs=0.02)
    assert answers["float32"]["refund"]["noul"] == pytest.approx(answers["int8"]["refund"]["noul"], abs=0.05)
    bad = run_cli(*args, "--precision", "fp8", cache=tmp_path / "cache")
    assert bad.returncode == 2 and "invalid choice: 'fp8'" in bad.stderr and "Traceback" not in bad.stderr


# ---------------------------------------------------------------- SmolLM2-135M

# vs float32: (max |Δp|, the gap between float32's top two above which the best answer may not change).
# Measured on these cases: max |Δp| ~0.011 in bf16, ~0.066 in int8 (bench.precision, 250 questions
# a task: ≤ 0.026 and ≤ 0.098).
TOLERANCES = {"bfloat16": (0.05, 0.1), "int8": (0.12, 0.2)}


@pytest.fixture(scope="module", params=list(TOLERANCES))
def smollm_onednn(request):
    from conftest import REAL_MODEL_CACHE

    return load_model("smollm2-135m", cache_dir=REAL_MODEL_CACHE, progress=False, precision=request.param)


@pytest.mark.smollm
@pytest.mark.parametrize("case", ["standard", "choice40"])
def test_smollm_onednn_is_close_to_the_float32_reference(smollm, smollm_onednn, case):
    request = getattr(cases, case)()
    reference = Decider(smollm, DeciderOptions(scorer="trie")).decide(request)  # exact to the reference scorer
    got = Decider(smollm_onednn).decide(request)
    assert Decider(smollm_onednn).options.scorer == "trie"
    tolerance, tie = TOLERANCES[smollm_onednn.precision]
    for a, b in zip(got.answers, reference.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=tolerance, rtol=0)
        top_two = np.sort(b.probabilities)[-2:]
        if top_two[1] - top_two[0] > tie:
            assert a.best.value == b.best.value
