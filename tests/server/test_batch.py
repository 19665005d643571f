"""`decide batch` as a real subprocess on the tiny GGUF model: answers, error rows, bad files, resume, --server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import ServerProcess
from tiny_model import write_tiny_gguf

from decide.batch.output import Journal
from decide.batch.table import select
from decide.core import Decider
from decide.models import load_model
from decide.wire import openai, systemone

SCRIPT = Path(sys.executable).with_name("decide")
SYSTEMONE = {
    "refund": {"type": "noul", "instructions": "The customer wants money back"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "technical": None}},
    "anger": {"type": "score", "instructions": "How angry is the customer?", "criteria": ["calm", "annoyed", "angry"]},
}
OPENAI = [
    {"type": "predicate", "name": "refund", "instructions": "Does the customer want money back?"},
    {
        "type": "choice",
        "name": "team",
        "instructions": "Which team?",
        "choices": [{"value": "billing"}, {"value": "tech"}],
    },
    {"type": "score", "name": "anger", "instructions": "How angry?", "levels": [{"label": "calm"}, {"label": "angry"}]},
]
TOO_LONG = "refund " * 3000  # over the tiny model's 2,048-token context


def texts(n: int) -> list[str]:
    topics = ["I was charged twice, refund me.", "The app crashes on start.", "Do you sell gift cards?"]
    return [f"Ticket {i}: {topics[i % 3]} Order {i * 37 % 101}." for i in range(n)]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("batch") / "tiny.gguf", seed=3)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "DECIDE_MODEL"}
    return {**environ, "DECIDE_CACHE_DIR": str(tmp_path_factory.mktemp("batch-cache"))}


@pytest.fixture(scope="module")
def decider(model, tmp_path_factory) -> Decider:
    return Decider(load_model(str(model), cache_dir=tmp_path_factory.mktemp("batch-lib"), progress=False))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def batch(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), "batch", *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def assert_close(got, want) -> None:
    """Equal JSON values, floats within 1e-6 (batched passes may round differently)."""
    if isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-6)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_close(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w)
    else:
        assert got == want


def test_rows_are_answered_as_the_library_answers_each_alone(env, model, decider, tmp_path):
    rows = [{"id": f"t{i}", "text": t, "lang": "en"} for i, t in enumerate(texts(6))]
    rows[2]["text"] = ""
    rows[4]["text"] = TOO_LONG
    del rows[5]["text"]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    questions = write_json(tmp_path / "q.json", {"questions": SYSTEMONE})
    out = tmp_path / "out.jsonl"
    result = batch(env, source, "-q", questions, "-o", out, "-m", model, "--batch-size", "4")
    assert result.returncode == 0, result.stderr
    assert "6 rows answered (3 errors)" in result.stderr and "\r" not in result.stderr  # no bar off a TTY
    records = read_jsonl(out)
    assert [r["row"] for r in records] == list(range(6))
    assert [r["id"] for r in records] == [r["id"] for r in rows] and all("text" not in r for r in records)
    for i in (0, 1, 3):
        want = systemone.decide(decider, {"model": "jev-latest", "state": rows[i]["text"], "questions": SYSTEMONE})
        assert records[i]["error"] is None
        assert_close(records[i]["answers"], want["answers"])
        assert records[i]["usage"] == want["usage"]
    assert records[2]["error"] == {"type": "empty_text", "message": "the text is empty"}
    assert (
        records[4]["error"]["type"] == "context_length_exceeded" and "context is 2048" in records[4]["error"]["message"]
    )
    assert records[5]["error"] == {"type": "invalid_text", "message": "the text is missing"}
    assert records[2]["answers"] is None and records[2]["lang"] == "en"


def test_openai_question_files_are_detected(env, model, decider, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [{"body": t} for t in texts(3)])
    out = tmp_path / "out.jsonl"
    questions = write_json(tmp_path / "q.json", OPENAI)  # a bare list: OpenAI Decisions questions
    result = batch(env, source, "-q", questions, "-o", out, "-m", model, "--text-field", "body", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    for record, text in zip(read_jsonl(out), texts(3)):
        want = openai.decide(decider, {"model": "gpt-6-luna", "input": text, "questions": OPENAI})
        assert [a["name"] for a in record["answers"]] == ["refund", "team", "anger"]
        assert_close(record["answers"], want["answers"])


def test_csv_in_parquet_out_keeps_columns_and_order(env, model, tmp_path):
    source = tmp_path / "in.csv"
    source.write_text('id,text,score\n1,"Refund me, please",3\n2,"The app crashes",5\n3,,1\n', encoding="utf-8")
    questions = write_json(tmp_path / "q.json", SYSTEMONE)  # bare System One questions
    out = tmp_path / "out.parquet"
    result = batch(env, source, "-q", questions, "-o", out, "-m", model, "--quiet")
    assert result.returncode == 0, result.stderr
    table = pq.read_table(out)
    assert table.column_names == ["id", "score", "row", "answers", "usage", "error"]
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == ["1", "2", "3"] and [r["row"] for r in rows] == [0, 1, 2]
    assert rows[0]["answers"]["team"]["choice"] in ("billing", "technical") and rows[2]["error"]["type"] == "empty_text"
    assert not list(tmp_path.glob("out.parquet.*")), "the journal is removed once the Parquet file is assembled"


def test_jsonl_rows_with_different_columns_make_one_parquet_table(env, model, tmp_path):
    rows = [{"text": "Refund me."}, {"text": "Crash!", "tag": "bug"}, {"text": "Hi", "n": 3}]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    out = tmp_path / "out.parquet"
    assert batch(env, source, "-q", questions, "-o", out, "-m", model, "--quiet").returncode == 0
    got = pq.read_table(out).to_pylist()
    assert [(r["tag"], r["n"]) for r in got] == [(None, None), ("bug", None), (None, 3)]


def test_parquet_in_keeps_column_types_and_a_rerun_adds_rows(env, model, tmp_path):
    table = pa.table(
        {"text": texts(8), "n": pa.array(range(8), pa.int16()), "at": pa.array(range(8), pa.timestamp("ms"))}
    )
    source = tmp_path / "in.parquet"
    pq.write_table(table, source)
    questions = write_json(tmp_path / "q.json", {"questions": SYSTEMONE})
    out = tmp_path / "out.parquet"
    assert batch(env, source, "-q", questions, "-o", out, "-m", model, "--limit", "5").returncode == 0
    assert pq.read_table(out)["row"].to_pylist() == [0, 1, 2, 3, 4]
    result = batch(env, source, "-q", questions, "-o", out, "-m", model)
    assert result.returncode == 0, result.stderr
    assert "5 of 8 rows already in" in result.stderr and "3 rows answered" in result.stderr
    got = pq.read_table(out)
    assert got["row"].to_pylist() == list(range(8))
    assert got.schema.field("n").type == pa.int16() and got.schema.field("at").type == pa.timestamp("ms")
    assert got["n"].to_pylist() == list(range(8))


def test_sample_and_limit_select_rows_in_input_order(env, model, tmp_path):
    assert select(10, limit=3) == [0, 1, 2]
    sample = select(100, sample=10, seed=7)
    assert sample == sorted(sample) and len(set(sample)) == 10 and sample == select(100, sample=10, seed=7)
    assert sample != select(100, sample=10, seed=8)
    source = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts(30)])
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    out = tmp_path / "out.jsonl"
    result = batch(
        env, source, "-q", questions, "-o", out, "-m", model, "--sample", "10", "--seed", "7", "--limit", "4"
    )
    assert result.returncode == 0, result.stderr
    assert [r["row"] for r in read_jsonl(out)] == select(30, limit=4, sample=10, seed=7)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("in.jsonl", '{"text": "a"}\n{"text": "b"\n', "in.jsonl line 2: not valid JSON"),
        ("in.jsonl", '{"text": "a"}\n["b"]\n', "line 2: expected a JSON object per line, got list"),
        ("in.jsonl", '{"body": "a"}\n', "has no column 'text' (columns: body); name the text with --text-field"),
        ("in.jsonl", '{"text": "a", "answers": 1}\n', "column 'answers' would clash with the output's own 'answers'"),
        ("in.csv", "text,id\nhello,1,extra\n", "line 2: 3 fields but the header has 2; quote fields"),
        ("in.csv", "", "empty CSV file"),
        ("in.parquet", "not parquet", "is not a readable Parquet file"),
        ("in.txt", "text\n", "unknown format '.txt'; use .jsonl, .csv or .parquet"),
    ],
)
def test_a_malformed_input_fails_before_any_compute(env, tmp_path, name, content, message):
    source = tmp_path / name
    source.write_text(content)
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    # A model that does not exist: these mistakes must be caught before it is looked up.
    result = batch(env, source, "-q", questions, "-o", tmp_path / "out.jsonl", "-m", "no-such-model")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    ("questions", "message"),
    [
        ("{not json", "q.json is not valid JSON"),
        ('"refund?"', "expected System One questions (an object of questions by id) or OpenAI Decisions questions"),
        (json.dumps({"refund": {"type": "choice", "instructions": "x"}}), "questions.refund.choice.criteria"),
        (json.dumps([{"type": "choice", "instructions": "Which?", "choices": []}]), "questions[0].choices"),
        (json.dumps({"b": {"type": "box", "instructions": "x"}}), "box questions are not supported"),
    ],
)
def test_a_malformed_question_file_fails_before_any_compute(env, tmp_path, questions, message):
    source = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    (tmp_path / "q.json").write_text(questions)
    result = batch(env, source, "-q", tmp_path / "q.json", "-o", tmp_path / "out.jsonl", "-m", "no-such-model")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_an_output_of_another_input_is_refused(env, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    out = write_jsonl(tmp_path / "out.jsonl", [{"row": 5, "answers": None}])
    result = batch(env, source, "-q", questions, "-o", out, "-m", "no-such-model")
    assert result.returncode == 2 and "holds row 5 but the input has 1 rows" in result.stderr
    (tmp_path / "other.jsonl").write_text('{"name": "not ours"}\n')
    result = batch(env, source, "-q", questions, "-o", tmp_path / "other.jsonl", "-m", "no-such-model")
    assert result.returncode == 2 and "line 1 is not a decide batch record" in result.stderr


def test_a_torn_last_line_is_dropped_on_resume(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"row": 0}\n{"row": 1}\n{"row": 2, "answ')
    journal = Journal(path)
    assert journal.done == {0, 1}
    assert path.read_bytes() == b'{"row": 0}\n{"row": 1}\n'


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_kill_9_then_rerun_answers_each_row_exactly_once(env, model, decider, tmp_path, fmt):
    n = 100
    source = write_jsonl(tmp_path / "in.jsonl", [{"text": t, "i": i} for i, t in enumerate(texts(n))])
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    out = tmp_path / f"out.{fmt}"
    journal = out if fmt == "jsonl" else tmp_path / f"out.{fmt}.journal.jsonl"
    args = [str(SCRIPT), "batch", source, "-q", questions, "-o", out, "-m", model, "--batch-size", "2", "--quiet"]
    proc = subprocess.Popen(list(map(str, args)), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 10):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    with journal.open("ab") as f:  # as if the kill had landed in the middle of a write
        f.write(b'{"row": 999, "answers": {"refund"')
    done = journal.read_bytes().count(b"\n")
    assert 10 <= done < n, "the kill landed mid-run"
    result = batch(env, source, "-q", questions, "-o", out, "-m", model, "--batch-size", "7")
    assert result.returncode == 0, result.stderr
    assert f"{done} of {n} rows already in" in result.stderr
    rows = read_jsonl(out) if fmt == "jsonl" else pq.read_table(out).to_pylist()
    assert [r["row"] for r in rows] == list(range(n)) and [r["i"] for r in rows] == list(range(n))
    assert all(r["error"] is None for r in rows)
    for i in (0, done - 1, done, n - 1):  # both sides of the kill
        want = systemone.decide(decider, {"model": "jev-latest", "state": texts(n)[i], "questions": SYSTEMONE})
        assert_close(rows[i]["answers"], want["answers"])


@pytest.fixture(scope="module")
def server(tmp_path_factory, model):
    root = tmp_path_factory.mktemp("batch-server")
    env = {"DECIDE_MODEL": str(model), "DECIDE_CACHE_DIR": str(root / "cache"), "DECIDE_API_KEY": "sekrit"}
    with ServerProcess.start(env=env) as running:
        yield running


@pytest.mark.parametrize("questions", [{"questions": SYSTEMONE}, {"questions": OPENAI}])
def test_server_mode_answers_what_the_engine_answers_in_process(env, model, server, tmp_path, questions):
    rows = [{"text": t, "k": i} for i, t in enumerate(texts(12))]
    rows[3]["text"] = TOO_LONG
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    qfile = write_json(tmp_path / "q.json", questions)
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert batch(env, source, "-q", qfile, "-o", local, "-m", model, "--quiet").returncode == 0
    result = batch(
        env, source, "-q", qfile, "-o", remote, "--server", server.url, "--concurrency", "3", "--api-key", "sekrit"
    )
    assert result.returncode == 0, result.stderr
    got, want = read_jsonl(remote), read_jsonl(local)
    assert [r["row"] for r in got] == list(range(12)) and [r["k"] for r in got] == list(range(12))
    for g, w in zip(got, want):
        if w["error"] is None:
            assert g["error"] is None
            assert_close(g["answers"], w["answers"])
            assert g["usage"]["input_tokens"] == w["usage"]["input_tokens"]
    assert got[3]["answers"] is None and got[3]["error"]["status"] == 400
    assert "context is 2048" in got[3]["error"]["message"]


def test_a_wrong_key_stops_the_run_instead_of_failing_every_row(env, server, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts(2)])
    qfile = write_json(tmp_path / "q.json", SYSTEMONE)
    out = tmp_path / "out.jsonl"
    result = batch(env, source, "-q", qfile, "-o", out, "--server", server.url, "--api-key", "wrong")
    assert result.returncode == 2
    assert "refused the request (401: invalid API key); fix it, then rerun" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_an_unreachable_server_stops_the_run_with_what_to_do(env, tmp_path):
    from server_process import free_port

    source = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    qfile = write_json(tmp_path / "q.json", SYSTEMONE)
    out = tmp_path / "out.jsonl"
    url = f"http://127.0.0.1:{free_port()}"
    result = batch(env, source, "-q", qfile, "-o", out, "--server", url, "--retries", "1")
    assert result.returncode == 2
    assert "still fails after 1 retries (unreachable" in result.stderr and "rerun the same command" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_the_progress_bar_shows_rows_per_second_and_eta_on_a_terminal(env, model, tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    source = write_jsonl(tmp_path / "in.jsonl", [{"text": t} for t in texts(8)])
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    args = [SCRIPT, "batch", source, "-q", questions, "-o", tmp_path / "out.jsonl", "-m", model, "--batch-size", "2"]
    proc = subprocess.Popen(list(map(str, args)), env=env, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the run is over
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0, shown.decode(errors="replace")
    text = shown.decode(errors="replace")
    assert "8/8" in text and "row/s" in text and re.search(r"<\d\d:\d\d", text), text  # rate and ETA


def test_the_client_retries_429_and_503_after_the_servers_retry_after(monkeypatch):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from decide.batch.questions import QuestionSet
    from decide.batch.runners import Client

    replies = [(429, {"Retry-After": "2", "retry-after-ms": "1500"}), (503, {"Retry-After": "3"}), (500, {}), (200, {})]
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            status, headers = replies[len(seen) - 1]
            body = {"answers": {"refund": {"type": "noul", "noul": 0.5}}, "usage": {"input_tokens": 3}}
            data = json.dumps(body if status == 200 else {"detail": {"message": "busy"}}).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    waits = []
    monkeypatch.setattr("decide.batch.runners.time.sleep", waits.append)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        questions = QuestionSet.from_json({"refund": SYSTEMONE["refund"]})
        client = Client(f"http://127.0.0.1:{server.server_port}", questions, backoff=0.25)
        record = client.answer("Refund me.")
    finally:
        server.shutdown()
        server.server_close()
    assert record == {"answers": {"refund": {"type": "noul", "noul": 0.5}}, "usage": {"input_tokens": 3}, "error": None}
    assert waits == [1.5, 3.0, 1.0]  # retry-after-ms, then Retry-After, then backoff 0.25 * 2**2
    assert [path for path, _ in seen] == ["/v1/systemone"] * 4
    assert seen[0][1] == {"questions": {"refund": SYSTEMONE["refund"]}, "model": "jev-latest", "state": "Refund me."}


def test_numbers_out_of_range_are_refused(env, tmp_path):
    result = batch(env, "in.jsonl", "-q", "q.json", "-o", "out.jsonl", "--concurrency", "0")
    assert result.returncode == 2 and "--concurrency must be at least 1" in result.stderr


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, 10**6), unique=True, max_size=12), cut=st.integers(0, 10**4), data=st.data())
def test_a_journal_cut_anywhere_recovers_exactly_its_complete_lines(tmp_path_factory, rows, cut, data):
    path = tmp_path_factory.mktemp("journal") / "out.jsonl"
    lines = [json.dumps({"row": r, "note": data.draw(st.text(max_size=8))}).encode() + b"\n" for r in rows]
    blob = b"".join(lines)
    path.write_bytes(blob[: cut % (len(blob) + 1)])
    kept = path.read_bytes().count(b"\n")
    journal = Journal(path)
    assert journal.done == set(rows[:kept])
    assert path.read_bytes() == b"".join(lines[:kept])
    journal.append([{"row": -1}])
    journal.close()
    assert Journal(path).done == {*rows[:kept], -1}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    picked=st.lists(st.sampled_from([*texts(9), "", "  ", None, 7, TOO_LONG]), min_size=1, max_size=7),
    batch_size=st.integers(1, 4),
)
def test_rows_batched_together_answer_as_each_row_alone(decider, picked, batch_size):
    from decide.batch.questions import QuestionSet
    from decide.batch.runners import in_process

    questions = QuestionSet.from_json(SYSTEMONE)
    answered = [
        record for chunk in in_process(decider, questions, dict(enumerate(picked)), batch_size) for record in chunk
    ]
    assert [row for row, _ in answered] == list(range(len(picked)))
    for (_, record), text in zip(answered, picked):
        if isinstance(text, str) and text.strip() and text != TOO_LONG:
            want = systemone.decide(decider, {"model": "jev-latest", "state": text, "questions": SYSTEMONE})
            assert record["error"] is None
            assert_close(record["answers"], want["answers"])
            assert record["usage"] == want["usage"]
        else:
            assert record["answers"] is None and record["error"]["type"] in (
                "empty_text", "invalid_text", "context_length_exceeded"
            )  # fmt: skip


@pytest.mark.parametrize(
    ("package", "args", "message"),
    [
        ("pyarrow", ["-o", "out.parquet"], "Parquet needs pyarrow: pip install 'mlx-decide[batch]'"),
        ("ray", ["-o", "out.jsonl", "--ray"], "--ray needs Ray Data: pip install 'mlx-decide[ray]'"),
    ],
)
def test_a_missing_optional_dependency_says_what_to_install(env, tmp_path, package, args, message):
    shadow = tmp_path / "shadow" / package  # an installed-but-broken stand-in: `import` fails as if absent
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    paths = [str(shadow.parent), env.get("PYTHONPATH", "")]
    source = write_jsonl(tmp_path / "in.jsonl", [{"text": "hello"}])
    questions = write_json(tmp_path / "q.json", SYSTEMONE)
    shadowed = {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    result = subprocess.run(
        [str(SCRIPT), "batch", str(source), "-q", str(questions), *args, "-m", "no-such-model"],
        env=shadowed, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
