"""Throughput under concurrency: `gunicorn wsgi:app` on 127.0.0.1, the standard request from 1, 4 and 8 threads.

    python -m bench.concurrency [--seconds 15] [--clients 1,4,8]

Two servers in one run, the same model: `batched` (the default engine: requests queued together share
forward passes) and `serial` (DECIDE_BATCH_MAX_TOKENS=1: one request per pass). Two workloads:
`same` sends the standard request itself (bench/cases.py) again and again; `varied` gives every request
its own ticket (the standard ticket with a per-request reference line appended), so nothing but the
chat template and the first part of the ticket is shared across requests. Since 2026-12-06 an equal
request queued or running is followed, not computed again (decide_followed_total), so on `same` the
clients that send while one computes share its answer: `varied` is the workload that measures batching.
Each client thread keeps one
connection and sends its next request when the last one answered; only 200s count. Prints a table and
writes .benchmarks/concurrency-<model>.json.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from . import config as settings
from .cases import SYSTEMONE_QUESTIONS, TICKET

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from server_process import ServerProcess  # noqa: E402  (the tests' gunicorn launcher)

WORKLOADS = ("same", "varied")
MODES = {"batched": {}, "serial": {"DECIDE_BATCH_MAX_TOKENS": "1"}}


def body(ticket: str) -> bytes:
    """The standard request as a System One body."""
    return json.dumps(
        {
            "model": "jev-latest",
            "state": ticket,
            "questions": SYSTEMONE_QUESTIONS,
        }
    ).encode()


def tickets(workload: str):
    if workload == "same":
        return itertools.repeat(TICKET)
    return (f"{TICKET}\nReference: case {n:05d}." for n in itertools.count())


class Client(threading.Thread):
    def __init__(self, port: int, next_body, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.port, self.next_body, self.stop_at = port, next_body, stop_at
        self.latencies: list[float] = []
        self.other_statuses: list[int] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        while time.monotonic() < self.stop_at:
            started = time.monotonic()
            conn.request("POST", "/v1/systemone", self.next_body(), {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                self.latencies.append(time.monotonic() - started)
            else:
                self.other_statuses.append(response.status)
        conn.close()


def run_load(port: int, workload: str, clients: int, seconds: float) -> dict:
    source, lock = tickets(workload), threading.Lock()

    def next_body() -> bytes:
        with lock:
            return body(next(source))

    started = time.monotonic()
    threads = [Client(port, next_body, started + seconds) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started  # includes the requests still running at the stop time
    latencies = sorted(x for t in threads for x in t.latencies)
    return {
        "requests": len(latencies),
        "throughput": len(latencies) / elapsed,
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p90": latencies[int(0.9 * (len(latencies) - 1))] if latencies else float("nan"),
        "not_200": sorted({s for t in threads for s in t.other_statuses}),
    }


def measure(model: str, clients: list[int], seconds: float) -> list[dict]:
    rows = []
    for mode, env in MODES.items():
        with ServerProcess.start("wsgi:app", env={"DECIDE_MODEL": model, "DECIDE_API_KEY": "", **env}) as server:
            run_load(server.port, "same", 1, min(5.0, seconds))  # warm-up: first forwards, prefix cache
            for workload in WORKLOADS:
                for n in clients:
                    result = run_load(server.port, workload, n, seconds)
                    rows.append({"mode": mode, "workload": workload, "clients": n, **result})
                    print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict) -> str:
    extra = f"  other statuses {r['not_200']}" if r["not_200"] else ""
    return (
        f"{r['workload']:<7} {r['mode']:<8} {r['clients']:>3} clients  {r['throughput']:6.2f} req/s  "
        f"p50 {r['p50']:6.2f} s  p90 {r['p90']:6.2f} s  ({r['requests']} requests){extra}"
    )


def summary(rows: list[dict]) -> str:
    by = {(r["workload"], r["mode"], r["clients"]): r for r in rows}
    lines = ["", "batching speed-up (throughput batched / serial, same run):"]
    for workload in WORKLOADS:
        ratios = []
        for n in sorted({r["clients"] for r in rows}):
            b, s = by.get((workload, "batched", n)), by.get((workload, "serial", n))
            if b and s and s["throughput"] > 0:
                ratios.append(f"{n} clients {b['throughput'] / s['throughput']:.2f}x")
        lines.append(f"  {workload:<7} " + ", ".join(ratios))
    four = by.get(("same", "batched", 4))
    if four:
        lines.append(f"target: 4 clients >= 1.5 req/s (standard request): {four['throughput']:.2f} req/s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="load time per row")
    parser.add_argument("--clients", default="1,4,8")
    args = parser.parse_args(argv)
    model = settings.model()
    rows = measure(model, [int(x) for x in args.clients.split(",")], args.seconds)
    print(summary(rows))
    out = Path(".benchmarks") / f"concurrency-{model.replace('/', '_')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"model": model, "seconds": args.seconds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
