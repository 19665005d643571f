"""Serving overhead: the same request in process and through gunicorn, interleaved, in one run.

    python -m bench.overhead [--rounds 7] [--model M]

One in-process Decider (`decide.wire.systemone.decide`: the protocol's parse, the engine, render)
and one `gunicorn wsgi:app` serve the same System One request, turn about, each with the server's
default prefix cache (1 GiB). Each round sends a new ticket (the standard ticket plus a round
number) to both, so both caches see the same requests and reuse the same prefix. The server's access-log line splits its time:
`compute_ms` (the engine's batch, the forward included), `queue_ms`, and the rest of `duration_ms`
(parse, validation, render, Flask). The client's wall time minus `duration_ms` is gunicorn and
the socket. CPU use is the worker's (or this process's) CPU seconds over wall seconds: 2.0 on two
busy cores. Prints medians and the differences to in process.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import time
from pathlib import Path

import decide.runtime  # noqa: F401  (BLAS before mlx)
from decide.core import Decider, DeciderOptions
from decide.models import load_model
from decide.wire import systemone

from . import config
from .cases import SYSTEMONE_QUESTIONS, TICKET
from .concurrency import ServerProcess
from .harness import as_served

TICKS = os.sysconf("SC_CLK_TCK")
CACHE_BYTES = 1 << 30


def body(round_: int) -> dict:
    return {
        "model": "jev-latest",
        "state": f"{TICKET}\nReference: case {round_:05d}.",
        "questions": SYSTEMONE_QUESTIONS,
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def worker_pid(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return int(children[0])


def post(port: int, payload: dict) -> tuple[dict, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    started = time.perf_counter()
    conn.request("POST", "/v1/systemone", json.dumps(payload).encode(), {"Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    elapsed = time.perf_counter() - started
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"the server answered {response.status}: {answer}")
    return answer, elapsed


def access_lines(log: str) -> list[dict]:
    return [json.loads(line.partition("decide.access: ")[2]) for line in log.splitlines() if "decide.access: {" in line]


def measure(model: str, rounds: int, server_env: dict[str, str]) -> dict[str, list[float]]:
    decider = Decider(load_model(model), DeciderOptions().with_prefix_cache(CACHE_BYTES))
    env = {"DECIDE_MODEL": model, "DECIDE_API_KEY": "", "DECIDE_PREFIX_CACHE_BYTES": str(CACHE_BYTES), **server_env}
    rows: dict[str, list[float]] = {k: [] for k in ("in_process", "in_process_cpu", "client", "cpu", "compute")}
    rows.update(queue=[], handler=[], transport=[])
    with ServerProcess.start("wsgi:app", env=env) as server:
        worker = worker_pid(server.proc.pid)
        systemone.decide(decider, body(0))  # warm-up: first forwards, calibration priors
        post(server.port, body(0))
        for r in range(1, rounds + 1):
            started, cpu = time.perf_counter(), time.process_time()
            want = systemone.decide(decider, body(r))
            rows["in_process"].append(time.perf_counter() - started)
            rows["in_process_cpu"].append((time.process_time() - cpu) / rows["in_process"][-1])
            before = cpu_seconds(worker)
            got, elapsed = post(server.port, body(r))
            rows["client"].append(elapsed)
            rows["cpu"].append((cpu_seconds(worker) - before) / elapsed)
            line = access_lines(server.log_text())[-1]
            rows["compute"].append(line["compute_ms"] / 1000)
            rows["queue"].append(line["queue_ms"] / 1000)
            rows["handler"].append((line["duration_ms"] - line["compute_ms"] - line["queue_ms"]) / 1000)
            rows["transport"].append(elapsed - line["duration_ms"] / 1000)
            assert got["answers"].keys() == want["answers"].keys()
    return rows


def report(model: str, rows: dict[str, list[float]]) -> str:
    m = {k: statistics.median(v) for k, v in rows.items()}
    n = len(rows["client"])
    return "\n".join(
        [
            f"{model}, standard request (System One), a new ticket per round, median of {n} interleaved rounds",
            f"  in process          {m['in_process']:.3f} s   CPU use {m['in_process_cpu']:.2f} cores",
            f"  through gunicorn    {m['client']:.3f} s   CPU use {m['cpu']:.2f} cores (the worker)",
            f"    engine compute    {m['compute']:.3f} s   ({m['compute'] - m['in_process']:+.3f} s vs in process)",
            f"    queue             {m['queue']:.3f} s",
            f"    handler           {m['handler']:.3f} s   (parse, validate, render, Flask)",
            f"    gunicorn, socket  {m['transport']:.3f} s",
            f"  overhead            {m['client'] - m['in_process']:+.3f} s ({m['client'] / m['in_process']:.2f}x)",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--model", default=config.model())
    parser.add_argument("--server-env", nargs="*", default=[], metavar="NAME=VALUE", help="extra server settings")
    args = parser.parse_args(argv)
    as_served()  # the server tunes its malloc: so does the in-process side
    server_env = dict(item.split("=", 1) for item in args.server_env)
    print(report(args.model, measure(args.model, args.rounds, server_env)), flush=True)


if __name__ == "__main__":
    main()
