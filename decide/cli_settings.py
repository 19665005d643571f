"""The model's settings as CLI flags, shared by `decide run` and `decide batch`: --precision,
--calibration and --profile, each defaulting to its DECIDE_* variable as the server's does."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from . import bf16
from .quality import calibration

if TYPE_CHECKING:
    from .core import DeciderOptions

SETTINGS = ("precision", "calibration", "profile")


def add_model_settings(parser) -> None:
    """Add the three flags to `parser` (a parser or an argument group)."""
    parser.add_argument("--precision", choices=bf16.PRECISIONS, default=None, help=bf16.PRECISION_HELP)
    parser.add_argument(
        "--calibration",
        default=None,
        help=f"{', '.join(calibration.METHODS)} (default: $DECIDE_CALIBRATION or {calibration.DEFAULT})",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="a `decide fit` profile for the questions it was fitted on (default: $DECIDE_PROFILE)",
    )


def given_settings(args: argparse.Namespace) -> list[str]:
    """The flags of the three that were given."""
    return [f"--{name}" for name in SETTINGS if getattr(args, name) is not None]


def model_options(args: argparse.Namespace) -> DeciderOptions:
    """The Decider options the flags (and the environment, where a flag is unset) name, checked: a bad
    calibration or an unreadable profile fails here, before a model loads."""
    from .core import DeciderOptions

    return DeciderOptions(**{name: getattr(args, name) for name in SETTINGS}).resolved()
