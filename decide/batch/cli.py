"""`decide batch INPUT -q QUESTIONS -o OUTPUT`: answer every row of a file, resumably.

    decide batch tickets.csv -q questions.json -o answers.jsonl -m smollm2-135m
    decide batch tickets.parquet -q questions.json -o answers.parquet --server http://127.0.0.1:8000
    decide batch tickets.parquet -q questions.json -o answers.parquet --ray auto --concurrency 8

Everything that can be wrong with the files is found before a model loads or a request is sent.
Rerun the same command after a crash or Ctrl-C: rows already in OUTPUT are skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..cli_settings import add_model_settings, given_settings, model_options
from .output import Output, OutputError
from .questions import QuestionSet
from .runners import Answered, Client, ServerError, in_process, over_http
from .table import InputError, read_rows, select

if TYPE_CHECKING:
    from ..core import DeciderOptions

LOCAL_RAY = "local"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "batch",
        help="answer questions about every row of a JSONL, CSV or Parquet file (resumable)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("input", metavar="INPUT", help="rows to answer: .jsonl, .csv or .parquet")
    p.add_argument("-q", "--questions", required=True, help="JSON file of System One or OpenAI Decisions questions")
    p.add_argument("-o", "--output", required=True, help=".jsonl or .parquet; rerun with the same file to resume")
    p.add_argument("--text-field", default="text", help="the column holding the text (default: text)")
    p.add_argument("-m", "--model", default=None, help="alias, folder, .gguf or HF id (default: $DECIDE_MODEL)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--server", metavar="URL", help="send one request per row to a decide server (its origin)")
    where.add_argument(
        "--ray", nargs="?", const=LOCAL_RAY, metavar="ADDRESS", help="run on Ray (no ADDRESS: a local Ray)"
    )
    p.add_argument(
        "--concurrency", type=int, default=None, help="requests in flight (--server, 4) or actors (--ray, 2)"
    )
    p.add_argument("--batch-size", type=int, default=16, help="rows per engine call (default 16)")
    p.add_argument("--api-key", default=os.environ.get("DECIDE_API_KEY"), help="server key (default $DECIDE_API_KEY)")
    p.add_argument("--retries", type=int, default=8, help="retries of a request on 429/503/5xx (default 8)")
    p.add_argument("--limit", type=int, default=None, help="answer at most the first N selected rows")
    p.add_argument("--sample", type=int, default=None, help="answer a random sample of N rows (see --seed)")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    add_model_settings(p.add_argument_group("the model's settings (in process and --ray; a --server has its own)"))
    p.add_argument("--quiet", action="store_true", help="no progress bar, logs or summary")
    p.set_defaults(func=cmd_batch)


def cmd_batch(args: argparse.Namespace) -> int:
    from ..cli import CLIError

    _check_numbers(args)
    options = _decider_options(args)
    try:
        questions = QuestionSet.load(args.questions)
        rows = read_rows(args.input, args.text_field)
        output = Output(args.output, rows, args.text_field)
    except (InputError, OutputError, ValueError) as e:
        raise CLIError(str(e)) from None
    chosen = select(len(rows.records), args.limit, args.sample, args.seed)
    todo = {r: rows.records[r].get(args.text_field) for r in chosen if r not in output.done}
    say = (lambda message: None) if args.quiet else (lambda message: print(f"decide batch: {message}", file=sys.stderr))
    if len(todo) < len(chosen):
        say(f"{len(chosen) - len(todo)} of {len(chosen)} rows already in {args.output}; resuming")
    try:
        answers = _answers(args, options, questions, todo)  # loads the model first: not counted in rows/s
        started = time.monotonic()
        written, errors = _write(output, answers, len(todo), args.quiet)
    except ServerError as e:
        raise CLIError(f"{e}; fix it, then rerun the same command to resume") from None
    output.finish()
    seconds = time.monotonic() - started
    rate = f", {written / seconds:.1f} rows/s" if written and seconds > 0 else ""
    say(f"{written} rows answered ({errors} errors) in {seconds:.1f} s{rate} -> {args.output}")
    return 0


def _check_numbers(args: argparse.Namespace) -> None:
    from ..cli import CLIError

    for flag, least in (("concurrency", 1), ("batch_size", 1), ("limit", 0), ("sample", 0), ("retries", 0)):
        value = getattr(args, flag)
        if value is not None and value < least:
            raise CLIError(f"--{flag.replace('_', '-')} must be at least {least}")


def _decider_options(args: argparse.Namespace) -> DeciderOptions | None:
    """The local model's options, checked before any file is read; None with --server, which refuses them."""
    from ..cli import CLIError

    if args.server:
        given = given_settings(args)
        if given:
            raise CLIError(f"{', '.join(given)} set the local model: a --server answers with its own settings")
        return None
    return model_options(args)


def _answers(
    args: argparse.Namespace, options: DeciderOptions | None, questions: QuestionSet, todo: dict
) -> Iterator[Answered]:
    if not todo:
        return iter(())
    if args.server:
        client = Client(args.server, questions, args.api_key, args.retries)
        return over_http(client, todo, args.concurrency or 4)
    if args.ray:
        from ..cli import CLIError
        from ..ray import on_ray

        try:
            import ray.data  # noqa: F401
        except ImportError:
            raise CLIError("--ray needs Ray Data: pip install 'mlx-decide[ray]'") from None
        address = None if args.ray == LOCAL_RAY else args.ray
        return on_ray(address, args.model, options, questions, todo, args.concurrency or 2, args.batch_size)
    from ..core import Decider

    decider = Decider.load(args.model, options, progress=not args.quiet)
    return in_process(decider, questions, todo, args.batch_size)


def _write(output: Output, answers: Iterator[Answered], total: int, quiet: bool) -> tuple[int, int]:
    from tqdm import tqdm

    show = not quiet and sys.stderr.isatty()
    written = errors = 0
    with tqdm(total=total, unit="row", disable=not show, file=sys.stderr, smoothing=0.1) as bar:
        for answered in answers:
            output.write(answered)
            written += len(answered)
            errors += sum(record["error"] is not None for _, record in answered)
            bar.update(len(answered))
    return written, errors
