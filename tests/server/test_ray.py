"""decide.ray on a local Ray instance this test starts (2 CPUs): answers equal the in-process run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray Data is an optional extra: pip install 'mlx-decide[ray]'")

from test_batch import SCRIPT, SYSTEMONE, assert_close, read_jsonl, texts, write_json, write_jsonl  # noqa: E402
from tiny_model import write_tiny_gguf  # noqa: E402

from decide.batch import QuestionSet, answer_texts  # noqa: E402
from decide.core import Decider, DeciderOptions  # noqa: E402
from decide.models import load_model  # noqa: E402
from decide.ray import DecideBatch  # noqa: E402

ROWS = 200


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("ray") / "tiny.gguf", seed=3)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def expected(model, tmp_path_factory) -> list[dict]:
    decider = Decider(load_model(str(model), cache_dir=tmp_path_factory.mktemp("ray-lib"), progress=False))
    return answer_texts(decider, QuestionSet.from_json(SYSTEMONE), texts(ROWS))


@pytest.mark.parametrize(("batch_format", "n"), [("pandas", ROWS), ("pyarrow", 40)])
def test_map_batches_answers_equal_the_in_process_run(local_ray, model, expected, batch_format, n):
    # `concurrency=2` is what Ray before 2.51 takes (and still accepts, with a logged deprecation)
    pool = {"compute": ray.data.ActorPoolStrategy(size=2)} if batch_format == "pyarrow" else {"concurrency": 2}
    ds = ray.data.from_items([{"text": t, "k": i} for i, t in enumerate(texts(n))])
    answered = ds.map_batches(
        DecideBatch,
        fn_constructor_kwargs={"questions": {"questions": SYSTEMONE}, "model": str(model)},
        batch_size=16,
        **pool,
        batch_format=batch_format,
    )
    rows = sorted(answered.take_all(), key=lambda r: r["k"])
    assert [r["k"] for r in rows] == list(range(n)) and rows[5]["text"] == texts(n)[5]
    for row, want in zip(rows, expected):
        assert row["error"] is None
        assert_close(json.loads(row["answers"]), want["answers"])
        assert json.loads(row["usage"]) == want["usage"]


def test_the_cli_runs_on_a_ray_cluster(local_ray, model, expected, tmp_path):
    rows = [{"text": t} for t in texts(40)]
    rows[7]["text"] = ""
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    out = tmp_path / "out.jsonl"
    command = [SCRIPT, "batch", source, "-q", questions, "-o", out, "-m", model, "--ray", "auto", "--concurrency", "2"]
    result = subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    got = read_jsonl(out)
    assert [r["row"] for r in got] == list(range(40))
    assert got[7]["error"]["type"] == "empty_text"
    for i, (row, want) in enumerate(zip(got, expected)):
        if i != 7:
            assert_close(row["answers"], want["answers"])


def test_actors_load_the_options_they_are_given(local_ray, model, expected, tmp_path):
    options = DeciderOptions(calibration="contextual")
    contextual = Decider(load_model(str(model), cache_dir=tmp_path, progress=False), options)
    want = answer_texts(contextual, QuestionSet.from_json(SYSTEMONE), texts(16))
    ds = ray.data.from_items([{"text": t, "k": i} for i, t in enumerate(texts(16))])
    answered = ds.map_batches(
        DecideBatch,
        fn_constructor_kwargs={"questions": SYSTEMONE, "model": str(model), "options": options},
        batch_size=8,
        compute=ray.data.ActorPoolStrategy(size=1),
        batch_format="pyarrow",
    )
    got = [json.loads(row["answers"]) for row in sorted(answered.take_all(), key=lambda r: r["k"])]
    assert len(got) == 16
    for answers, w in zip(got, want):
        assert_close(answers, w["answers"])
    assert got != [e["answers"] for e in expected[:16]]  # the suite's calibration answers otherwise
