"""The OpenAPI 3.1 document of the decision routes, served at `GET /openapi.json`.

Written from the protocol records: each protocol's components come from the constants, limits and
kind forms its parser uses. It is no stricter than the server (unknown fields are allowed, as the
server ignores them), so a body it calls invalid is one the server refuses with a 4xx; some rules
JSON Schema cannot state (tool outputs must follow their call, choice values are unique by type,
images must decode, the prompt must fit the context) are the server's alone.
"""

from __future__ import annotations

from .. import __version__
from ..wire import PROTOCOLS
from ..wire.protocol import COMMON_ERRORS, Protocol
from ..wire.schema import json_content

_RETRY = {
    "Retry-After": {"schema": {"type": "string", "pattern": "^[0-9]+$"}, "required": True},
    "retry-after-ms": {"schema": {"type": "string", "pattern": "^[0-9]+$"}, "required": True},
}


def _responses(protocol: Protocol) -> dict:
    out: dict = {"200": {"description": "the answers", "content": json_content(protocol.response)}}
    for status, text in sorted({**COMMON_ERRORS, **protocol.errors}.items()):
        schema = protocol.validation_error if status == "422" and protocol.validation_error else protocol.error
        out[status] = {"description": text, "content": json_content(schema)}
        if status in ("429", "503"):
            out[status]["headers"] = _RETRY
    return out


def _operation(protocol: Protocol) -> dict:
    return {
        "post": {
            "operationId": protocol.operation_id,
            "summary": protocol.summary,
            "requestBody": {"required": True, "content": protocol.request_content()},
            "responses": _responses(protocol),
        }
    }


def openapi_document() -> dict:
    """Built per call (a few dicts), so a kind registered at run time is documented too."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "decide",
            "version": __version__,
            "description": "A local decision server: OpenAI Decisions and TypeSafe System One over one model. "
            "With DECIDE_API_KEY set, every /v1 route needs 'Authorization: Bearer <key>'. Bodies may be "
            "zstd-encoded (Content-Encoding: zstd).",
        },
        "paths": {p.path: _operation(p) for p in PROTOCOLS},
        "components": {"schemas": {k: v for p in PROTOCOLS for k, v in p.schemas().items()}},
    }
