"""Every error as a Problem, rendered by the protocol of the route that raised it.

A protocol's own route answers in its shape (its `problem` hook first, for the statuses it
defines itself); every other path gets every protocol's keys merged, so either SDK finds a message.
"""

from __future__ import annotations

import json

from flask import Response
from werkzeug.exceptions import HTTPException

from ..errors import ContextLengthExceeded, DecideError, InvalidRequest, UnsupportedInput
from ..wire import PROTOCOLS
from ..wire.common import WireError
from ..wire.openai import bracket_path
from ..wire.protocol import Problem, Protocol, Unauthorized, UnknownModel

RETRY_AFTER_S = 1


def retry_headers(seconds: int) -> dict[str, str]:
    return {"Retry-After": str(seconds), "retry-after-ms": str(seconds * 1000)}


class Overloaded(Exception):
    """Too many requests are already waiting for the model (429)."""

    def __init__(self, retry_after: int = RETRY_AFTER_S) -> None:
        super().__init__("the server is busy; retry shortly")
        self.retry_after = retry_after


class Unavailable(Exception):
    """503 + Retry-After: the model is still loading (`code` "model_loading"), failed to load
    ("model_load_failed"), or the request waited in the queue past its deadline ("queue_timeout")."""

    def __init__(self, message: str, code: str, retry_after: int = RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retry_after = retry_after


class Forbidden(Exception):
    """403: a Host or Origin that this server does not serve (DNS rebinding, cross-site requests)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class HeadersTooLarge(Exception):
    """431: too many request headers, or too many bytes of them."""


class BudgetExceeded(Exception):
    """400: a request whose input tokens exceed the per-request budget, refused before compute."""


def dumps(body: object) -> str:
    """Compact UTF-8 JSON in insertion order; a NaN or Infinity is a bug and raises ValueError."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_response(body: object, status: int = 200, headers: dict | None = None) -> Response:
    return Response(dumps(body), status=status, headers=headers, mimetype="application/json")


def respond(exc: BaseException, protocol: Protocol | None, image_params: dict | None = None) -> Response:
    """The response to `exc` on a route of `protocol` (None: any other path)."""
    problem = (protocol.problem(exc) if protocol else None) or problem_for(exc, image_params or {})
    body = protocol.error_body(problem) if protocol else merged_body(problem)
    return json_response(body, problem.status, dict(problem.headers or {}) or None)


def merged_body(problem: Problem) -> dict:
    """Every protocol's error keys in one body, so that any client finds its message."""
    return {k: v for p in PROTOCOLS for k, v in p.error_body(problem).items()}


def problem_for(exc: BaseException, image_params: dict) -> Problem:
    """Map any exception to a Problem (what every protocol agrees on)."""
    if isinstance(exc, Unauthorized):
        if exc.missing:
            return Problem(401, "missing API key: send 'Authorization: Bearer <key>'", category="auth")
        return Problem(401, "invalid API key", "invalid_api_key", category="auth")
    if isinstance(exc, WireError):
        return Problem(exc.status, exc.message, exc.code, category=exc.category)
    if isinstance(exc, UnknownModel):
        return Problem(400, str(exc), "model_not_found", "model")
    # the serving layer's own: admission, readiness, hardening, budgets
    if isinstance(exc, Overloaded):
        return Problem(
            429, str(exc), "rate_limit_exceeded", category="rate_limit", headers=retry_headers(exc.retry_after)
        )
    if isinstance(exc, Unavailable):
        return Problem(503, exc.message, exc.code, category="unavailable", headers=retry_headers(exc.retry_after))
    if isinstance(exc, Forbidden):
        return Problem(403, exc.message, exc.code, category="forbidden")
    if isinstance(exc, HeadersTooLarge):
        return Problem(431, str(exc), "request_header_fields_too_large", category="headers")
    if isinstance(exc, BudgetExceeded):
        return Problem(400, str(exc), "token_budget_exceeded")
    if isinstance(exc, DecideError):
        return _domain(exc, image_params)
    if isinstance(exc, HTTPException):
        return _http(exc)
    return Problem(500, "the server failed to answer this request", category="internal")


def _domain(exc: DecideError, image_params: dict) -> Problem:
    message = getattr(exc, "message", str(exc))
    if isinstance(exc, UnsupportedInput):
        return Problem(400, message, exc.code, image_params.get(exc.path, bracket_path(exc.path)))
    if isinstance(exc, ContextLengthExceeded):
        return Problem(400, message, "context_length_exceeded")
    if isinstance(exc, InvalidRequest):
        return Problem(400, message, exc.code, bracket_path(exc.path))
    # ModelNotFound / ModelLoadError at request time: the server's fault, not the client's
    return Problem(500, message, category="internal")


_HTTP = {  # status → (code, category)
    404: ("not_found", "not_found"),
    405: ("method_not_allowed", "method"),
    413: ("request_too_large", "too_large"),
    415: ("unsupported_media_type", "media_type"),
}


def _http(exc: HTTPException) -> Problem:
    status = exc.code or 500
    code, category = _HTTP.get(status, (None, "invalid" if status < 500 else "internal"))
    message = "no such route; GET /v1 lists the routes" if status == 404 else exc.description or exc.name
    headers = {"Allow": ", ".join(exc.valid_methods)} if status == 405 and getattr(exc, "valid_methods", None) else None
    return Problem(status, message, code, category=category, headers=headers)
