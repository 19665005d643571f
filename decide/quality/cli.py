"""`decide eval` and `decide fit`: measure answers on labelled JSONL, and fit a profile from labels."""

from __future__ import annotations

import argparse
import sys
import time

from .. import bf16, cli
from . import calibration

MODEL_HELP = "alias, model folder, .gguf path or HF id (default: $DECIDE_MODEL or qwen2.5-coder-1.5b)"


def _modes(text: str) -> list[str]:
    from .calibration import METHODS

    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in (*METHODS, "batch", "profile")]
    if bad or not modes:
        raise cli.CLIError(
            f"--compare takes a comma-separated list of {', '.join(METHODS)}, batch, profile; got {text!r}"
        )
    return list(dict.fromkeys(modes))


def _load(path: str):
    from .data import DataError, load

    try:
        return load(path)
    except DataError as e:
        raise cli.CLIError(f"{e} (see `decide eval --help` for the format)") from None


def _decider(args, profile=None):
    from ..core import Decider, DeciderOptions

    options = DeciderOptions(calibration="none", precision=args.precision)
    return Decider.load(args.model, options, profile=profile, progress=not args.quiet)


def _print_written(decider, groups, modes: list[str]) -> None:
    """The examples the model wrote for each question (what the `examples` mode showed it)."""
    if not modes:
        return
    writer = decider.with_calibration(modes[0]).calibrator
    for g in groups:
        print(f"\nwritten examples ({g.name}):")
        for d in writer.demonstrations(g.question):
            print(f"  {g.question.options[d.option].value}: {d.input}")


def cmd_eval(args: argparse.Namespace) -> int:
    from .calibration import DEFAULT
    from .evaluate import evaluate, plot, report

    modes = _modes(args.compare or args.calibration or DEFAULT)
    if args.profile and "profile" not in modes:
        modes.append("profile")
    if "profile" in modes and not args.profile:
        raise cli.CLIError("--compare profile needs --profile DIR (a `decide fit` output)")
    examples = _load(args.data)[: args.limit]
    decider = _decider(args, args.profile)
    table, groups = evaluate(decider, examples, modes, decider.calibrator.profile, progress=not args.quiet)
    print(f"{len(examples)} examples from {args.data}, model {decider.model_id}")
    report(table, groups)
    _print_written(decider, groups, [m for m in modes if calibration.writes_examples(m)])
    if args.plot:
        plot(table, groups, args.plot)
        print(f"reliability diagram: {args.plot}")
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from .calibration import DEFAULT
    from .evaluate import evaluate, report, score, tabulate
    from .fit import MIN_LABELS, choose_demonstrations, cross_validated_probabilities, draft_profile, fit_profile
    from .metrics import Scores

    examples = _load(args.data)[: args.limit]
    decider = _decider(args)
    start = time.perf_counter()
    shown = choose_demonstrations(examples, args.demonstrations)
    held = {i for picks in shown.values() for i, _ in picks}
    fitted_on = [ex for i, ex in enumerate(examples) if i not in held]
    scorer = decider.with_profile(draft_profile(decider, shown))
    groups = score(scorer, fitted_on, progress=not args.quiet)
    scored_s = time.perf_counter() - start
    profile = fit_profile(decider, groups, shown)
    fit_s = time.perf_counter() - start - scored_s
    if not profile.entries:
        raise cli.CLIError(f"no question has enough labels to fit (at least {MIN_LABELS} each)")
    profile.save(args.output)
    print(
        f"fitted {len(profile.entries)} question(s) on {len(fitted_on)} examples ({len(held)} more shown as "
        f"demonstrations): scoring {scored_s:.0f} s, fit {fit_s:.1f} s"
    )
    for e in profile.entries.values():
        where = f" ({e.readout.described} of {len(decider.parts.layers)})" if e.method == "readout" else ""
        print(f"  {e.method}{where}, {len(e.demonstrations)} demonstrations: {e.instructions}")
    print(f"profile: {args.output} (model {decider.model_id})")
    fitted = [g for g in groups if profile.entry(g.question)]
    if args.dev:
        dev = _load(args.dev)
        modes = list(dict.fromkeys(["none", DEFAULT, "profile"]))
        table, dev_groups = evaluate(decider.with_profile(profile), dev, modes, profile, progress=not args.quiet)
        print(f"\ndev: {args.dev}, {len(dev)} examples")
        report(table, [g for g in dev_groups if profile.entry(g.question)])
        return 0
    # These rows read the fit's own scores (asked after the profile's demonstrations): a calibration that asks
    # after written examples has other prompts, so its prior-only sibling `temperature` stands in for it.
    before = "temperature" if calibration.writes_examples(DEFAULT) else DEFAULT
    table = tabulate(scorer, fitted, list(dict.fromkeys(["none", before])))
    for g in fitted:
        p = cross_validated_probabilities(g, args.cv)
        table[g.name][f"fitted ({args.cv}-fold)"] = (Scores.of(p, g.y), p)
    print(
        f"\nbefore / after, {args.cv}-fold cross-validated on the same labels (each fold fitted on the others); "
        "every column is asked after the question's demonstrations:"
    )
    report(table, fitted)
    return 0


def register(sub) -> None:
    """Add `eval` and `fit` to the `decide` command's subparsers."""
    ev = sub.add_parser("eval", help="measure answers on labelled JSONL (accuracy, F1, Brier, log loss, ECE)")
    ev.add_argument("data", help='labelled JSONL: {"state":..., "questions":{id: question}, "labels":{id: value}}')
    ev.add_argument("-m", "--model", default=None, help=MODEL_HELP)
    ev.add_argument("--precision", choices=bf16.PRECISIONS, default=None, help=bf16.PRECISION_HELP)
    ev.add_argument("--calibration", default=None, help="the mode to measure (default: the server's default)")
    ev.add_argument(
        "--compare",
        default=None,
        metavar="A,B",
        help=f"modes side by side: {','.join((*calibration.METHODS, 'batch', 'profile'))}",
    )
    ev.add_argument("--profile", default=None, metavar="DIR", help="a `decide fit` profile (adds the mode `profile`)")
    ev.add_argument("--plot", default=None, metavar="FILE.png", help="write a reliability diagram")
    ev.add_argument("--limit", type=int, default=None, help="only the first N examples")
    ev.add_argument("-q", "--quiet", action="store_true", help="no progress bars or logs")
    ev.set_defaults(func=cmd_eval)
    fit = sub.add_parser("fit", help="fit per-question readouts from labelled JSONL into a profile")
    fit.add_argument("data", help="labelled JSONL (the format of `decide eval`)")
    fit.add_argument("-o", "--output", required=True, metavar="PROFILE_DIR", help="where the profile is written")
    fit.add_argument("-m", "--model", default=None, help=MODEL_HELP)
    fit.add_argument("--precision", choices=bf16.PRECISIONS, default=None, help=bf16.PRECISION_HELP)
    fit.add_argument("--dev", default=None, metavar="DEV.jsonl", help="measure on these examples (default: --cv)")
    fit.add_argument("--cv", type=int, default=4, help="folds of the cross-validated before/after (default 4)")
    fit.add_argument("--limit", type=int, default=None, help="only the first N examples of DATA")
    fit.add_argument(
        "--demonstrations",
        type=int,
        default=None,
        metavar="N",
        help="labelled examples each question's prompt shows, not fitted on (default: 4, at least one per labelled "
        "option, at most 8; 0: none)",
    )
    fit.add_argument("-q", "--quiet", action="store_true", help="no progress bars or logs")
    fit.set_defaults(func=cmd_fit)


if __name__ == "__main__":
    sys.exit(cli.main())
