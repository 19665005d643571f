"""Every error as a JSON response in the shape of the route that raised it.

Route families: `openai` (/v1/decisions: `{"error": {...}}`), `systemone` (/v1/systemone:
`{"detail": ...}`) and `merged` (every other path: both keys, so either SDK finds a message).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from flask import Response
from werkzeug.exceptions import HTTPException

from ..errors import ContextLengthExceeded, DecideError, InvalidRequest, UnsupportedInput
from ..wire import openai, systemone
from ..wire.common import MalformedBody, WireError

RETRY_AFTER_S = 1


def retry_headers(seconds: int) -> dict[str, str]:
    return {"Retry-After": str(seconds), "retry-after-ms": str(seconds * 1000)}


class Unauthorized(Exception):
    """No usable `Authorization: Bearer` header (`missing`), or the wrong key."""

    def __init__(self, missing: bool) -> None:
        super().__init__("missing API key" if missing else "invalid API key")
        self.missing = missing


class UnknownModel(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown model: {name}")
        self.name = name


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


def family(path: str) -> str:
    if path == "/v1/decisions":
        return "openai"
    if path == "/v1/systemone":
        return "systemone"
    return "merged"


def dumps(body: object) -> str:
    """Compact UTF-8 JSON in insertion order; a NaN or Infinity is a bug and raises ValueError."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_response(body: object, status: int = 200, headers: dict | None = None) -> Response:
    return Response(dumps(body), status=status, headers=headers, mimetype="application/json")


@dataclass
class Problem:
    """One error in protocol-neutral terms; `shape()` picks the body for a route family."""

    status: int
    message: str
    code: str | None = None  # OpenAI error.code
    param: str | None = None  # OpenAI error.param
    type: str = "invalid_request_error"  # OpenAI error.type
    error_type: str = "api_usage_error"  # System One detail.error_type
    detail: list | None = None  # System One 422 entries, when the problem is a validation failure
    headers: dict | None = None
    merged: bool = False  # render the merged body whatever the route (unknown paths)

    def shape(self, fam: str) -> Response:
        fam = "merged" if self.merged else fam
        oa = openai.error_body(self.message, type=self.type, param=self.param, code=self.code)
        s1 = (
            systemone.validation_body(self.detail)
            if self.detail
            else systemone.error_body(self.error_type, self.message)
        )
        body = oa if fam == "openai" else s1 if fam == "systemone" else {**oa, **s1}
        return json_response(body, self.status, self.headers)


def problem_for(exc: BaseException, fam: str, image_params: dict | None = None) -> Problem:
    """Map any exception to a Problem for family `fam` (statuses differ by protocol for some)."""
    if isinstance(exc, Unauthorized):
        return _auth(exc, fam)
    if isinstance(exc, MalformedBody):
        return _malformed(exc, fam)
    if isinstance(exc, WireError):
        return Problem(exc.status, exc.message, exc.code, error_type=exc.error_type)
    if isinstance(exc, systemone.ValidationFailed):
        return Problem(422, str(exc), "invalid_value", detail=exc.entries)
    if isinstance(exc, systemone.UsageError):
        return Problem(400, exc.message)
    if isinstance(exc, UnknownModel):
        status = 404 if fam == "openai" else 400
        return Problem(status, str(exc), "model_not_found", "model")
    if isinstance(exc, (Overloaded, Unavailable, Forbidden, HeadersTooLarge, BudgetExceeded)):
        return _serving(exc)
    if isinstance(exc, DecideError):
        return _domain(exc, image_params or {})
    if isinstance(exc, HTTPException):
        return _http(exc)
    return Problem(
        500, "the server failed to answer this request", None, type="server_error", error_type="internal_error"
    )


def _serving(exc: Exception) -> Problem:
    """The problems the serving layer adds (admission, readiness, hardening, budgets)."""
    if isinstance(exc, Overloaded):
        return Problem(
            429,
            str(exc),
            "rate_limit_exceeded",
            type="rate_limit_error",
            error_type="rate_limit_error",
            headers=retry_headers(exc.retry_after),
        )
    if isinstance(exc, Unavailable):
        return Problem(
            503,
            exc.message,
            exc.code,
            type="server_error",
            error_type="overloaded_error",
            headers=retry_headers(exc.retry_after),
        )
    if isinstance(exc, Forbidden):
        return Problem(403, exc.message, exc.code, error_type="permission_denied")
    if isinstance(exc, HeadersTooLarge):
        return Problem(431, str(exc), "request_header_fields_too_large", error_type="request_header_fields_too_large")
    return Problem(400, str(exc), "token_budget_exceeded")


def _auth(exc: Unauthorized, fam: str) -> Problem:
    if fam == "systemone" and exc.missing:
        return Problem(403, "send the API key as 'Authorization: Bearer <key>'", error_type="authentication_error")
    code = None if exc.missing else "invalid_api_key"
    message = "missing API key: send 'Authorization: Bearer <key>'" if exc.missing else "invalid API key"
    return Problem(401, message, code, error_type="authentication_error")


def _malformed(exc: MalformedBody, fam: str) -> Problem:
    if fam != "systemone":
        return Problem(400, exc.message)
    if exc.not_object:
        entry = systemone.entry([], "dict_type")
    elif exc.loc:
        entry = systemone.entry(list(exc.loc[1:]), "value_error", f"Value error, {exc.message}")
    else:
        entry = systemone.entry([exc.offset or 0], "json_invalid", f"JSON decode error: {exc.message}")
    return Problem(422, exc.message, detail=[entry])


def _domain(exc: DecideError, image_params: dict) -> Problem:
    message = getattr(exc, "message", str(exc))
    if isinstance(exc, UnsupportedInput):
        return Problem(400, message, exc.code, image_params.get(exc.path, openai.bracket_path(exc.path)))
    if isinstance(exc, ContextLengthExceeded):
        return Problem(400, message, "context_length_exceeded")
    if isinstance(exc, InvalidRequest):
        return Problem(400, message, exc.code, openai.bracket_path(exc.path))
    # ModelNotFound / ModelLoadError at request time: the server's fault, not the client's
    return Problem(500, message, None, type="server_error", error_type="internal_error")


_HTTP_CODES = {
    404: ("not_found", "not_found"),
    405: ("method_not_allowed", "method_not_allowed"),
    413: ("request_too_large", "request_too_large"),
    415: ("unsupported_media_type", "unsupported_media_type"),
}


def _http(exc: HTTPException) -> Problem:
    status = exc.code or 500
    code, error_type = _HTTP_CODES.get(status, (None, "api_usage_error" if status < 500 else "internal_error"))
    message = "no such route; GET /v1 lists the routes" if status == 404 else exc.description or exc.name
    headers = {"Allow": ", ".join(exc.valid_methods)} if status == 405 and getattr(exc, "valid_methods", None) else None
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return Problem(status, message, code, type=kind, error_type=error_type, headers=headers, merged=status == 404)
