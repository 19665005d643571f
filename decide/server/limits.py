"""The server's configurable caps on parsed requests, reported in each protocol's own error shape.

The wire parsers enforce the protocols' fixed maxima (400 questions, 255 choices...); an operator
may lower the option and image caps here (DECIDE_MAX_OPTIONS, DECIDE_MAX_IMAGES).
"""

from __future__ import annotations

from .. import kinds
from ..errors import InvalidRequest
from ..request import DecisionRequest
from ..wire import openai, systemone
from .config import ServerConfig


def _too_many_options(request: DecisionRequest, cap: int) -> tuple[int, int] | None:
    for i, q in enumerate(request.questions):
        if len(q.options) > cap:
            return i, len(q.options)
    return None


def check_openai(request: DecisionRequest, config: ServerConfig) -> None:
    """400 `array_above_max_length` with the offending field as `param`."""
    if hit := _too_many_options(request, config.max_options):
        i, n = hit
        field = kinds.by_form(openai.FORMS, request.questions[i].spec).field
        raise InvalidRequest(
            f"array too long. This server takes at most {config.max_options} {field}, got {n}.",
            ("questions", i, field),
            "array_above_max_length",
        )
    if (n := len(request.images)) > config.max_images:
        raise InvalidRequest(
            f"too many images. This server takes at most {config.max_images} per request, got {n}.",
            ("input",),
            "array_above_max_length",
        )


def check_systemone(request: DecisionRequest, ids: tuple[str, ...], config: ServerConfig) -> None:
    """422 `too_long` at the question's criteria, or at `assets` for images."""
    if hit := _too_many_options(request, config.max_options):
        i, n = hit
        loc = ["questions", ids[i], request.questions[i].spec.wire["systemone"], "criteria"]
        msg = f"this server takes at most {config.max_options} options per question, not {n}"
        raise systemone.ValidationFailed([systemone.entry(loc, "too_long", msg, {"max_length": config.max_options})])
    if (n := len(request.images)) > config.max_images:
        msg = f"this server takes at most {config.max_images} images per request, not {n}"
        raise systemone.ValidationFailed(
            [systemone.entry(["assets"], "too_long", msg, {"max_length": config.max_images})]
        )
