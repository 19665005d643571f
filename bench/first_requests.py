"""A new question's first requests, as a client with the TypeSafe SDK's defaults sees them from a server.

    python -m bench.first_requests build/eval/trec-w0-dev.jsonl [-n 40] [--wait 2]

`gunicorn wsgi:app` on DECIDE_BENCH_MODEL (default smollm2-135m) with the default calibration
(`examples`: the model writes examples for each new question) and DECIDE_WRITING_WAIT_S=--wait; one
client asks the first N rows of a labelled JSONL (`decide eval`'s format) one after another with the
TypeSafe SDK as it comes (10 s timeout, two retries). Prints each request's latency and whether it was
answered right, then the errors, the accuracy and how many requests were answered while the examples
were still being written (the server's /metrics, decide_examples_to_write). With the library's behaviour (--wait 600) the first request waits for the
writing: minutes on the 1.5B model, past the SDK's patience.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import config as settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from server_process import ServerProcess  # noqa: E402  (the tests' gunicorn launcher)


def sdk_questions(questions: dict) -> dict:
    from typesafe_sdk import Choice, Noul, Score

    kinds = {"choice": Choice, "noul": Noul, "score": Score}
    return {
        qid: kinds[q["type"]](instructions=q["instructions"], criteria=q.get("criteria"))
        for qid, q in questions.items()
    }


def answered_index(question: dict, answer) -> int:
    """The option the SDK's answer names, as an index (a yes/no: 1 for yes, as decide.quality.data counts)."""
    if question["type"] == "noul":
        return int(answer.noul > 0.5)
    if question["type"] == "choice":
        return list(question["criteria"]).index(answer.choice)
    probabilities = answer.probabilities
    values = list(probabilities.values()) if isinstance(probabilities, dict) else list(probabilities)
    return max(range(len(values)), key=values.__getitem__)


def wait_until_ready(server: ServerProcess) -> None:
    import requests

    while requests.get(server.url + "/health", timeout=10).json().get("status") != "ok":
        time.sleep(1)


def writing(server: ServerProcess) -> bool:
    """Whether the server is still writing examples (its /metrics)."""
    import requests

    text = requests.get(server.url + "/metrics", timeout=10).text
    return any(
        line.startswith("decide_examples_to_write ") and float(line.split()[1]) > 0 for line in text.splitlines()
    )


def run(path: str, n: int, wait_s: float) -> list[tuple[float, bool | None, bool]]:
    """(seconds, right or None for an error, examples still being written after it) per request."""
    from typesafe_sdk import TypeSafeClient

    from decide.quality.data import load

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()][:n]
    labels = [ex.labels for ex in load(path)[:n]]
    env = {"DECIDE_MODEL": settings.model(), "DECIDE_API_KEY": "", "DECIDE_WRITING_WAIT_S": str(wait_s)}
    results = []
    with ServerProcess.start("wsgi:app", env=env) as server:
        wait_until_ready(server)
        client = TypeSafeClient(api_key="bench", base_url=server.url)
        for i, (row, label) in enumerate(zip(rows, labels)):
            started = time.perf_counter()
            try:
                response = client.system_one(state=row["state"], questions=sdk_questions(row["questions"]))
                (qid, question), (want, *_) = next(iter(row["questions"].items())), label
                answer = {**response.choices, **response.nouls, **response.scores}[qid]
                right: bool | None = answered_index(question, answer) == want
            except Exception as e:  # a timeout is what this measures
                right = None
                print(f"  {i:3d} {type(e).__name__}: {str(e)[:80]}", flush=True)
            results.append((time.perf_counter() - started, right, writing(server)))
            outcome = "error" if right is None else "right" if right else "wrong"
            print(f"{i:3d} {results[-1][0]:6.1f} s  {outcome}{'  (examples being written)' if results[-1][2] else ''}")
        client.close()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="labelled JSONL, one question per row (make eval-data)")
    parser.add_argument("-n", type=int, default=40, help="requests, the file's first rows")
    parser.add_argument("--wait", type=float, default=2.0, help="DECIDE_WRITING_WAIT_S")
    args = parser.parse_args(argv)
    results = run(args.data, args.n, args.wait)
    seconds = [s for s, _, _ in results]
    during = sum(1 for _, _, w in results if w)
    right = sum(1 for _, r, _ in results if r)
    errors = sum(1 for _, r, _ in results if r is None)
    after = [s for s, _, w in results if not w] or [0.0]
    print(
        f"{settings.model()}, DECIDE_WRITING_WAIT_S={args.wait}: {errors} errors, {right}/{len(results)} right; "
        f"{during} answered while the examples were being written (longest {max(seconds):.1f} s), "
        f"the others in {min(after):.2f}–{max(after):.2f} s"
    )


if __name__ == "__main__":
    main()
