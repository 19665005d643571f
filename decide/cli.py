"""`decide` on the command line: ask a model typed questions about a text.

    decide run -m smollm2-135m -s "I was charged twice." \\
        --noul "refund=The customer wants money back" \\
        --choice "team=billing,technical,sales" --score "anger=calm,annoyed,angry"

A choice or score may carry its own question text: --choice "team:Which team should take it?=billing,technical".
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from .errors import DecideError

BAR_WIDTH = 30


def _split_spec(spec: str, flag: str) -> tuple[str, str, str]:
    """'name[:instructions]=rest' → (name, instructions, rest)."""
    if "=" not in spec:
        raise argparse.ArgumentTypeError(f"{flag} expects NAME=..., got {spec!r}")
    head, rest = spec.split("=", 1)
    name, _, instructions = head.partition(":")
    return name.strip(), (instructions or name).strip(), rest


def systemone_body(args: argparse.Namespace) -> dict:
    """The CLI's questions as a System One request body (the CLI speaks the wire model too)."""
    questions: dict[str, dict] = {}
    for spec in args.noul:
        name, _, text = _split_spec(spec, "--noul")
        questions[name] = {"type": "noul", "instructions": text}
    for spec in args.choice:
        name, instructions, options = _split_spec(spec, "--choice")
        questions[name] = {
            "type": "choice",
            "instructions": instructions,
            "criteria": {o.strip(): None for o in options.split(",")},
        }
    for spec in args.score:
        name, instructions, levels = _split_spec(spec, "--score")
        questions[name] = {
            "type": "score",
            "instructions": instructions,
            "criteria": [x.strip() for x in levels.split(",")],
        }
    if not questions:
        raise argparse.ArgumentTypeError("ask at least one question: --noul, --choice or --score")
    return {"model": "jev-latest", "state": args.state, "questions": questions}


def bar(p: float) -> str:
    full = round(p * BAR_WIDTH)
    return "\u2588" * full + "\u00b7" * (BAR_WIDTH - full)


def print_answers(response: dict, out=sys.stdout) -> None:
    for name, a in response["answers"].items():
        if a["type"] == "noul":
            print(f"{name} (yes/no): {a['noul']:.3f}", file=out)
            print(f"  true   {bar(a['noul'])} {a['noul']:.3f}", file=out)
            continue
        probs = a["probabilities"]
        labels = a.get("legend", {k: k for k in probs})
        headline = f"{a['choice']}" if a["type"] == "choice" else f"{a['score']:.2f}"
        print(f"{name} ({a['type']}): {headline}  confidence {a['confidence']:.2f}", file=out)
        width = max(len(str(labels[k])) for k in probs)
        for k, p in probs.items():
            print(f"  {str(labels[k]):<{width}} {bar(p)} {p:.3f}", file=out)
    usage = response["usage"]
    print(f"({usage['input_tokens']} input tokens, model {response['model']})", file=out)


def cmd_run(args: argparse.Namespace) -> int:
    from .core import Decider

    body = systemone_body(args)
    decider = Decider.load(args.model, progress=not args.quiet)
    response = decider.decide_systemone(body)
    if args.json:
        print(json.dumps(response, ensure_ascii=False, indent=2, allow_nan=False))
    else:
        print_answers(response)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decide", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="answer questions about a text and print the probabilities")
    run.add_argument(
        "-m",
        "--model",
        default=None,
        help="alias, model folder, .gguf path or HF id (default: $DECIDE_MODEL or qwen2.5-coder-1.5b)",
    )
    run.add_argument("-s", "--state", required=True, help="the text the questions are about ('-' reads stdin)")
    run.add_argument("--noul", action="append", default=[], metavar="NAME=QUESTION", help="a yes/no question")
    run.add_argument(
        "--choice", action="append", default=[], metavar="NAME[:QUESTION]=A,B,C", help="a choice among options"
    )
    run.add_argument(
        "--score",
        action="append",
        default=[],
        metavar="NAME[:QUESTION]=LOW,...,HIGH",
        help="a score over ordered levels",
    )
    run.add_argument("--json", action="store_true", help="print the System One response body")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bars or logs")
    run.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if getattr(args, "quiet", False) else logging.INFO, format="%(message)s")
    if getattr(args, "state", None) == "-":
        args.state = sys.stdin.read()
    try:
        return args.func(args)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    except DecideError as e:
        print(f"decide: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
