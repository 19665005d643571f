"""`decide serve`: the HTTP server without a checkout. It runs gunicorn with the package's own
settings (decide/server/gunicorn_config.py) and WSGI app (decide/server/wsgi.py), exactly what
`gunicorn wsgi:app` runs in the repository; the flags set the DECIDE_* variables those read.

    decide serve --model smollm2-135m --bind 127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from . import bf16
from .cli import CLIError

# A file, not `python:decide.server.gunicorn_config`: importing the package would load MLX into
# gunicorn's master process, which forks the workers.
GUNICORN_CONFIG = str(Path(__file__).parent / "server" / "gunicorn_config.py")
WSGI_APP = "decide.server.wsgi:app"


def gunicorn_command() -> list[str]:
    return [sys.executable, "-m", "gunicorn", "--config", GUNICORN_CONFIG, WSGI_APP]


def serve_env(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the server: the caller's, with the flags as DECIDE_* settings."""
    env = dict(environ)
    flags = {
        "DECIDE_MODEL": args.model,
        "DECIDE_BIND": args.bind,
        "DECIDE_WORKERS": args.workers,
        "DECIDE_PRECISION": args.precision,
    }
    env.update({name: str(value) for name, value in flags.items() if value is not None})
    return env


def prepare_model(spec: str | None) -> None:
    """Find the model and convert it once, here in the terminal with a progress bar, so that a
    missing model is a message now rather than a worker that exits."""
    from .errors import ModelNotFound
    from .models.embedded import EMBEDDED
    from .models.sources import DEFAULT_MODEL, resolve

    alias = spec or DEFAULT_MODEL
    try:
        resolve(alias)
    except ModelNotFound as e:
        if alias in EMBEDDED:
            raise CLIError(f"{e}; or run: decide models install {alias}") from None
        raise


def _workers(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expects a number of workers of at least 1, got {text!r}")
    return int(text)


def cmd_serve(args: argparse.Namespace) -> NoReturn:
    env = serve_env(args, os.environ)
    prepare_model(env.get("DECIDE_MODEL"))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, gunicorn_command(), env)  # gunicorn takes this process (signals, exit code)


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve",
        help="run the HTTP server (gunicorn with decide's settings)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "-m", "--model", help="alias, model folder, .gguf path or HF id (default: $DECIDE_MODEL or qwen2.5-coder-1.5b)"
    )
    serve.add_argument("--bind", help="HOST:PORT to listen on (default: $DECIDE_BIND or 127.0.0.1:8000)")
    serve.add_argument(
        "--workers",
        type=_workers,
        help="gunicorn workers, each with its own model copy (default: $DECIDE_WORKERS or 1)",
    )
    serve.add_argument(
        "--precision",
        choices=bf16.PRECISIONS,
        help=bf16.PRECISION_HELP,
    )
    serve.set_defaults(func=cmd_serve, quiet=False)
