"""`decide` on the command line: ask a model typed questions about a text.

    decide run -m smollm2-135m -s "I was charged twice." \\
        --noul "refund=The customer wants money back" \\
        --choice "team=billing,technical,sales" --score "anger=calm,annoyed,angry"

A choice or score may carry its own question text: --choice "team:Which team should take it?=billing,technical".
Answers come back in the order the questions were given.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any, TextIO

from . import __version__, kinds
from .batch.cli import add_parser as add_batch_parser
from .cli_settings import add_model_settings, model_options
from .errors import DecideError
from .kinds import Predicate, Score
from .quality import cli as quality_cli
from .server.config import switched_on
from .server.memory import tame_malloc

BAR_WIDTH = 30
EXAMPLES = {
    "--noul": "refund=The customer wants money back",
    "--choice": "team=billing,technical",
    "--score": "anger=calm,angry",
}


class CLIError(Exception):
    """A mistake on the command line; the message says what to type instead."""


class _AddQuestion(argparse.Action):
    """Collects --noul/--choice/--score into one list so that answers keep the command line's order."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        namespace.questions = [*(namespace.questions or []), (option_string, value)]


def _split_spec(spec: str, flag: str) -> tuple[str, str, str]:
    """'name[:instructions]=rest' → (name, instructions, rest)."""
    head, eq, rest = spec.partition("=")
    name, _, instructions = head.partition(":")
    name = name.strip()
    if not eq or not name:
        raise CLIError(f"{flag} expects NAME=..., got {spec!r} (e.g. {flag} {EXAMPLES[flag]!r})")
    return name, (instructions or name).strip(), rest


def _items(text: str, flag: str, name: str) -> list[str]:
    items = [x.strip() for x in text.split(",")]
    if items == [""]:
        raise CLIError(f"{flag} {name}: no options given (e.g. {flag} {EXAMPLES[flag]!r})")
    if "" in items:
        raise CLIError(f"{flag} {name}: empty option in {text!r}; remove the extra comma")
    return items


def _question(flag: str, spec: str) -> tuple[str, dict]:
    """A flag's question as System One writes it: the flag names the kind (--noul, --choice, --score)."""
    name, instructions, rest = _split_spec(spec, flag)
    wire = flag.removeprefix("--")
    kind = kinds.on_wire("systemone")[wire]
    if isinstance(kind, Predicate):
        return name, {"type": wire, "instructions": rest}
    items = _items(rest, flag, name)
    if isinstance(kind, Score):
        return name, {"type": wire, "instructions": instructions, "criteria": items}
    duplicates = sorted({x for x in items if items.count(x) > 1})
    if duplicates:
        raise CLIError(f"{flag} {name}: option {duplicates[0]!r} is given twice; options must be distinct")
    return name, {"type": wire, "instructions": instructions, "criteria": dict.fromkeys(items)}


def systemone_body(state: str, specs: list[tuple[str, str]]) -> dict:
    """The CLI's questions as a System One request body (the CLI speaks the wire model too)."""
    questions: dict[str, dict] = {}
    for flag, spec in specs:
        name, question = _question(flag, spec)
        if name in questions:
            raise CLIError(f"two questions are named {name!r}; give each question its own name")
        questions[name] = question
    if not questions:
        raise CLIError("ask at least one question: --noul, --choice or --score")
    return {"model": "jev-latest", "state": state, "questions": questions}


def parse_body(body: dict):
    """Validate the body as the server would, before any model is loaded."""
    from .wire import systemone

    try:
        return systemone.parse(body)
    except systemone.ValidationFailed as e:
        problems = "; ".join(_problem(entry) for entry in e.entries)
        raise CLIError(problems) from None
    except systemone.UsageError as e:
        raise CLIError(e.message) from None


def _problem(entry: dict) -> str:
    where = [str(x) for x in entry["loc"][1:]]
    if where[:1] == ["questions"] and len(where) > 1:
        return f"question {where[1]!r}: {entry['msg']}"
    return f"{'.'.join(where) or 'request'}: {entry['msg']}"


def bar(p: float) -> str:
    full = round(p * BAR_WIDTH)
    return "\u2588" * full + "\u00b7" * (BAR_WIDTH - full)


def _rows(answer: dict) -> list[tuple[str, float]]:
    if "noul" in answer:  # a yes/no answer carries P(true) alone
        return [("false", 1.0 - answer["noul"]), ("true", answer["noul"])]
    labels = answer.get("legend", {})
    return [(str(labels.get(k, k)), p) for k, p in answer["probabilities"].items()]


def _headline(name: str, answer: dict) -> str:
    if "noul" in answer:
        return f"{name} (yes/no): P(true) = {answer['noul']:.3f}"
    best = f"{answer['score']:.2f}" if "score" in answer else answer["choice"]
    return f"{name} ({answer['type']}): {best}  confidence {answer['confidence']:.2f}"


def print_answers(response: dict, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for name, answer in response["answers"].items():
        print(_headline(name, answer), file=out)
        rows = _rows(answer)
        width = max(len(label) for label, _ in rows)
        for label, p in rows:
            print(f"  {label:<{width}} {bar(p)} {p:.3f}", file=out)
    print(f"({response['usage']['input_tokens']} input tokens, model {response['model']})", file=out)


def cmd_run(args: argparse.Namespace) -> int:
    from .core import Decider
    from .wire import systemone

    state = sys.stdin.read() if args.state == "-" else args.state
    parsed = parse_body(systemone_body(state, args.questions or []))
    decider = Decider.load(args.model, model_options(args), progress=not args.quiet)
    response: dict[str, Any] = systemone.render(decider.decide(parsed.request), parsed)
    if args.json:
        print(json.dumps(response, ensure_ascii=False, indent=2, allow_nan=False))
    else:
        print_answers(response)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decide", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="answer questions about a text and print the probabilities")
    run.add_argument(
        "-m",
        "--model",
        default=None,
        help="alias, model folder, .gguf path or HF id (default: $DECIDE_MODEL or qwen2.5-coder-1.5b)",
    )
    run.add_argument("-s", "--state", required=True, help="the text the questions are about ('-' reads stdin)")
    run.add_argument("--noul", action=_AddQuestion, dest="questions", metavar="NAME=QUESTION", help="a yes/no question")
    run.add_argument(
        "--choice",
        action=_AddQuestion,
        dest="questions",
        metavar="NAME[:QUESTION]=A,B,C",
        help="a choice among options",
    )
    run.add_argument(
        "--score",
        action=_AddQuestion,
        dest="questions",
        metavar="NAME[:QUESTION]=LOW,...,HIGH",
        help="a score over ordered levels",
    )
    add_model_settings(run)
    run.add_argument("--json", action="store_true", help="print the System One response body")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bars or logs")
    run.set_defaults(func=cmd_run)
    from . import cli_models, cli_serve

    cli_serve.register(sub)
    cli_models.register(sub)
    add_batch_parser(sub)
    quality_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    if switched_on("DECIDE_TUNE_MALLOC"):
        tame_malloc()  # as the server does: eval, fit and batch run the same large forward passes
    try:
        return args.func(args)
    except CLIError as e:
        parser.exit(2, f"decide: error: {e}\n")
    except DecideError as e:
        print(f"decide: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("decide: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
