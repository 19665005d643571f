"""`decide batch` throughput on smollm2-135m, every number from one run (the machine is shared: read ratios).

    python -m bench.batch [--rows 2000] [--rounds 4] [--ray-rows 400]

1. in process: `decide batch -m smollm2-135m` (rows share each engine call's trie and prefix cache);
2. one HTTP request per row: `decide batch --server` against `gunicorn wsgi:app` serving the same
   model, with 1 and with 4 requests in flight (the server merges concurrent requests into passes);
   every row's answers must equal the in-process run's before a rate is reported;
3. kill -9 in the middle of an in-process run, then the same command again: each row exactly once;
4. Ray Data: `DecideBatch` with 1 and with 2 actors on a local Ray (2 CPUs), actor start included.

The rows are split into `--rounds` slices and the three modes of 1-2 take turns on each slice, so
a change in the load of a shared machine falls on all of them alike. A mode's rows/s is its rows
over the seconds `decide batch` reports (model loading excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cases import SYSTEMONE_QUESTIONS as QUESTIONS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from server_process import ServerProcess  # noqa: E402  (the tests' gunicorn launcher)

MODEL = "smollm2-135m"
SCRIPT = Path(sys.executable).with_name("decide")
OPENINGS = ["Hello,", "Hi team,", "Good morning.", "To whom it may concern:", "Hey,"]
PROBLEMS = [
    "I was charged twice for my subscription this month",
    "the export page crashes every time I open it",
    "I cannot log in since I changed my password",
    "I would like a quote for 40 more seats",
    "the invoice for March shows the wrong company name",
    "your mobile app logs me out every few minutes",
    "I want to cancel my plan and get my money back",
    "the dashboard has been loading forever since yesterday",
]
CLOSINGS = ["Please fix this soon.", "Thanks in advance.", "This is urgent!", "No rush.", "I am very upset."]
SUMMARY = re.compile(r"(\d+) rows answered \((\d+) errors\) in ([\d.]+) s, ([\d.]+) rows/s")


def tickets(n: int) -> list[str]:
    return [
        f"{OPENINGS[i % 5]} {PROBLEMS[i * 7 % 8]} (order {1000 + i * 37 % 997}). {CLOSINGS[i * 3 % 5]}"
        for i in range(n)
    ]


def run(*args) -> float:
    """Seconds `decide batch` spent answering (it prints them; model loading excluded)."""
    result = subprocess.run([str(SCRIPT), "batch", *map(str, args)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    match = SUMMARY.search(result.stderr)
    assert match and match[2] == "0", result.stderr
    return float(match[3])


def answers(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["row"] for r in records] == list(range(len(records))), "each row exactly once, in input order"
    return [r["answers"] for r in records]


def max_difference(a, b) -> float:
    if isinstance(a, float):
        return abs(a - b)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        return max((max_difference(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list):
        return max((max_difference(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    assert a == b, (a, b)
    return 0.0


def kill_and_resume(source: Path, questions: Path, out: Path, rows: int) -> int:
    """kill -9 once a third of the rows are written, rerun; returns how many rows the first run kept."""
    args = [SCRIPT, "batch", source, "-q", questions, "-o", out, "-m", MODEL, "--quiet"]
    proc = subprocess.Popen(list(map(str, args)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (out.exists() and out.read_bytes().count(b"\n") >= rows // 3):
        assert proc.poll() is None, "the run ended before the kill"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = out.read_bytes().count(b"\n")
    subprocess.run(list(map(str, args)), check=True)
    return kept


def ray_rates(texts: list[str], actors_list: list[int]) -> dict[int, tuple[float, float]]:
    import ray

    from decide.ray import DecideBatch

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    out = {}
    try:
        for actors in actors_list:
            ds = ray.data.from_items([{"text": t} for t in texts])
            started = time.monotonic()
            done = ds.map_batches(
                DecideBatch,
                fn_constructor_kwargs={"questions": QUESTIONS, "model": MODEL},
                compute=ray.data.ActorPoolStrategy(size=actors),
                batch_size=16,
                batch_format="pyarrow",
            ).materialize()
            seconds = time.monotonic() - started
            assert done.count() == len(texts)
            out[actors] = (len(texts) / seconds, seconds)
    finally:
        ray.shutdown()
    return out


def compare_modes(work: Path, source: Path, questions: Path, opts: argparse.Namespace) -> list:
    """In process vs one HTTP request per row, taking turns on each slice; returns the in-process answers."""
    modes = {"in process": ["-m", MODEL, "--batch-size", opts.batch_size]}
    seconds = dict.fromkeys([*modes, "HTTP, 1 in flight", "HTTP, 4 in flight"], 0.0)
    got: dict[str, list] = {mode: [] for mode in seconds}
    size = -(-opts.rows // opts.rounds)
    with ServerProcess.start(env={"DECIDE_MODEL": MODEL, "DECIDE_API_KEY": ""}) as server:
        for c in (1, 4):
            modes[f"HTTP, {c} in flight"] = ["--server", server.url, "--concurrency", c]
        for k in range(opts.rounds):
            part = work / f"tickets-{k}.jsonl"
            part.write_text("".join(source.read_text().splitlines(keepends=True)[k * size : (k + 1) * size]))
            for mode, args in modes.items():
                out = work / f"{mode.replace(' ', '-').replace(',', '')}-{k}.jsonl"
                seconds[mode] += run(part, "-q", questions, "-o", out, *args)
                got[mode] += answers(out)
            print(
                f"round {k + 1}/{opts.rounds}: " + ", ".join(f"{m} {s:.0f} s" for m, s in seconds.items()), flush=True
            )
    want = got["in process"]
    rate = {mode: len(want) / s for mode, s in seconds.items()}
    for mode in seconds:
        diff = max_difference(got[mode], want)
        assert diff < 1e-4, f"{mode}: answers differ from in process by {diff}"
        print(
            f"{mode:>20}: {rate[mode]:6.2f} rows/s  ({seconds[mode]:.0f} s); "
            f"in process / this = {rate['in process'] / rate[mode]:.2f}x; answers within {diff:.1e}",
            flush=True,
        )

    return want


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--ray-rows", type=int, default=400)
    parser.add_argument("--batch-size", type=int, default=16)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="decide-bench-batch-"))
    source = work / "tickets.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(tickets(opts.rows))))
    questions = work / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    print(f"{opts.rows} rows x {len(QUESTIONS)} questions, {MODEL}; files in {work}", flush=True)

    want = compare_modes(work, source, questions, opts)

    resumed = work / "resumed.jsonl"
    kept = kill_and_resume(source, questions, resumed, opts.rows)
    diff = max_difference(answers(resumed), want)
    print(f"kill -9 after {kept} rows, rerun: {opts.rows} rows, each exactly once; answers within {diff:.1e}")

    texts = tickets(opts.ray_rows)
    rates = ray_rates(texts, [1, 2])
    for actors, (per_second, spent) in rates.items():
        print(
            f"Ray Data, {actors} actor(s), {len(texts)} rows: {per_second:6.2f} rows/s ({spent:.0f} s, actors' start included)"
        )
    print(f"Ray 2 actors / 1 actor: {rates[2][0] / rates[1][0]:.2f}x")


if __name__ == "__main__":
    main()
