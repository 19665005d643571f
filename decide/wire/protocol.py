"""A wire protocol as one record: the server routes, answers errors and documents itself by
looping over the records in `decide.wire.PROTOCOLS`, so a new protocol is one new module.

No Flask here: a Problem is an error in protocol-neutral terms, and each protocol renders it
in its own shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..answers import Decision
from .common import Limits


class Unauthorized(Exception):
    """No usable `Authorization: Bearer` header (`missing`), or the wrong key."""

    def __init__(self, missing: bool) -> None:
        super().__init__("missing API key" if missing else "invalid API key")
        self.missing = missing


class UnknownModel(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown model: {name}")
        self.name = name


@dataclass(frozen=True)
class Problem:
    """One error before any protocol shapes it. `category` says what went wrong (invalid, auth,
    forbidden, rate_limit, unavailable, internal, too_large, media_type, headers, not_found, method);
    `cause` is the exception, for a protocol that renders more of it (System One's 422 entries)."""

    status: int
    message: str
    code: str | None = None  # a stable reason for programs
    param: str | None = None  # where in the body
    category: str = "invalid"
    headers: Mapping[str, str] | None = None
    cause: BaseException | None = None


@dataclass(frozen=True)
class Protocol:
    """Everything the server and the OpenAPI document need to know about one protocol."""

    title: str  # "OpenAI Decisions"
    path: str  # its POST route
    operation_id: str
    summary: str
    # decoded body bytes, Content-Type → (the JSON body, other multipart parts by name or None)
    read: Callable[[bytes, str], tuple[Any, Mapping[str, bytes] | None]]
    # (body, parts, limits) → a parsed request with `.request` and `.model`
    parse: Callable[[Any, Mapping[str, bytes] | None, Limits], Any]
    # (parsed, max options per question, max images) → raise when the server's own caps are crossed
    check_caps: Callable[[Any, int, int], None]
    render: Callable[[Decision, Any], dict]
    # this protocol's own answer to an exception, or None for the shared one
    problem: Callable[[BaseException], Problem | None]
    error_body: Callable[[Problem], dict]
    schemas: Callable[[], dict[str, dict]]  # its OpenAPI components
    request_content: Callable[[], dict]  # its OpenAPI requestBody content
    response: str  # the components of a 200 body, an error body, a 422 body (if any)
    error: str
    errors: Mapping[str, str]  # documented error statuses → when they happen (besides COMMON_ERRORS)
    validation_error: str | None = None

    def decide(self, decider: Any, body: Any) -> dict:
        """A request body in, its response body out, answered by `decider` (a decide.Decider)."""
        parsed = self.parse(body, None, Limits())
        return self.render(decider.decide(parsed.request), parsed)


COMMON_ERRORS = {
    "413": "body over the size cap (after zstd decoding too)",
    "429": "queue full: retry after Retry-After seconds",
    "431": "too many or too large request headers",
    "500": "model or runtime failure",
    "503": "model loading, or the request waited past its deadline: retry after Retry-After seconds",
}
