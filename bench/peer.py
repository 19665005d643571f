"""decide beside another System One server, the same requests, in one run.

    python -m bench.peer --peer http://127.0.0.1:8311 [--model smollm2-135m] [--rounds 5] [--seconds 20]

Starts `gunicorn wsgi:app` on the model and sends the same requests to it and to the peer (a server
you started, on the same model), turn about: the standard ticket's three questions and one choice
among 40 described options, each round on a new ticket (a case number in its first line, so no two
requests share more than the chat template), then `--clients` threads sending new tickets for
`--seconds` to each server in turn. Prints medians, throughput and decide's ratio to the peer.
Any answer but a 200 stops the run; the machine should be otherwise idle.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import statistics
import threading
import time
from urllib.parse import urlsplit

from . import config
from .cases import SYSTEMONE_QUESTIONS, TICKET, choice40
from .concurrency import ServerProcess

AREA = choice40().questions[0]
REQUESTS = {
    "ticket, 3 questions": SYSTEMONE_QUESTIONS,
    "40 options": {
        "area": {
            "type": "choice",
            "instructions": AREA.instructions,
            "criteria": {o.value: o.description for o in AREA.options},
        }
    },
}


def body(questions: dict, case: int) -> bytes:
    return json.dumps({"model": "jev-latest", "state": f"Case {case:06d}.\n{TICKET}", "questions": questions}).encode()


def post(address: tuple[str, int], payload: bytes) -> float:
    conn = http.client.HTTPConnection(*address, timeout=300)
    started = time.perf_counter()
    conn.request("POST", "/v1/systemone", payload, {"Content-Type": "application/json"})
    response = conn.getresponse()
    text = response.read()
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"{address}: {response.status} {text[:300]!r}")
    return time.perf_counter() - started


def load(address: tuple[str, int], clients: int, seconds: float, cases) -> float:
    """Requests per second of `clients` threads, each sending a new ticket when its last one answered."""
    lock, done = threading.Lock(), []
    stop_at = time.monotonic() + seconds

    def client() -> None:
        while time.monotonic() < stop_at:
            with lock:
                payload = body(SYSTEMONE_QUESTIONS, next(cases))
            post(address, payload)
            done.append(1)

    started = time.monotonic()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(done) / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="base URL of the other server, e.g. http://127.0.0.1:8311")
    parser.add_argument("--model", default=config.model())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--server-env", nargs="*", default=[], metavar="NAME=VALUE", help="extra decide settings")
    args = parser.parse_args(argv)
    peer = urlsplit(args.peer)
    env = {"DECIDE_MODEL": args.model, "DECIDE_API_KEY": "", **dict(kv.split("=", 1) for kv in args.server_env)}
    cases = itertools.count()
    with ServerProcess.start("wsgi:app", env=env) as server:
        servers = {"decide": ("127.0.0.1", server.port), "peer": (peer.hostname, peer.port or 80)}
        for address in servers.values():  # warm-up: first forwards, lazy imports
            for questions in REQUESTS.values():
                post(address, body(questions, next(cases)))
        times = {(name, req): [] for name in servers for req in REQUESTS}
        for _ in range(args.rounds):
            for req, questions in REQUESTS.items():
                case = next(cases)
                for name, address in servers.items():
                    times[name, req].append(post(address, body(questions, case)))
        rates = {name: load(address, args.clients, args.seconds, cases) for name, address in servers.items()}
    print(f"model {args.model}, {args.rounds} rounds, medians (s); peer {args.peer}")
    print(f"{'request':<22} {'decide':>8} {'peer':>8} {'decide is':>10}")
    for req in REQUESTS:
        d, p = statistics.median(times["decide", req]), statistics.median(times["peer", req])
        print(f"{req:<22} {d:8.3f} {p:8.3f} {p / d:9.2f}x")
    d, p = rates["decide"], rates["peer"]
    print(f"{f'{args.clients} clients (req/s)':<22} {d:8.2f} {p:8.2f} {d / p:9.2f}x")


if __name__ == "__main__":
    main()
