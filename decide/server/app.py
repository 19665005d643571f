"""The Flask app: both wire protocols over one decider (contract §0–§2).

    app = create_app()                                  # loads Decider.load(DECIDE_MODEL)
    app = create_app(ServerConfig(api_key="k"), decider=my_fake)   # tests

The decider is anything with `model_id`, `supports_images`, `info` and `decide(DecisionRequest)`.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

from flask import Flask, Response, current_app, g, request

from ..answers import Decision
from ..errors import UnsupportedInput
from ..request import DecisionRequest
from ..wire import openai, systemone
from ..wire.common import (
    OPENAI_ALIAS,
    SYSTEMONE_ALIAS,
    BodyTooLarge,
    Limits,
    UnsupportedMediaType,
    decode_body,
    is_multipart,
    loads_object,
    loads_strict,
    models_body,
    parse_multipart,
)
from ..wire.images import fetch_remote
from .config import ServerConfig
from .errors import Overloaded, Unauthorized, UnknownModel, family, json_response, problem_for

log = logging.getLogger("decide.server")

ROUTES = [
    {"method": "POST", "path": "/v1/decisions", "protocol": "OpenAI Decisions"},
    {"method": "POST", "path": "/v1/systemone", "protocol": "TypeSafe System One"},
    {"method": "GET", "path": "/v1/models", "protocol": "OpenAI + TypeSafe"},
    {"method": "GET", "path": "/v1", "protocol": "route index"},
    {"method": "GET", "path": "/health", "protocol": "server status"},
]


class DeciderLike(Protocol):
    model_id: str
    supports_images: bool
    info: dict

    def decide(self, request: DecisionRequest) -> Decision: ...


@dataclass
class State:
    """What the app keeps in `app.extensions["decide"]`."""

    config: ServerConfig
    decider: DeciderLike
    limits: Limits
    admission: threading.BoundedSemaphore
    started: float

    def accepted_models(self) -> set[str]:
        return {self.decider.model_id, OPENAI_ALIAS, SYSTEMONE_ALIAS, *self.config.aliases}


def create_app(config: ServerConfig | None = None, decider: DeciderLike | None = None) -> Flask:
    """The WSGI app. Without a decider, loads `Decider.load(config.model)` (a bad model fails here)."""
    config = config or ServerConfig.from_env()
    if decider is None:
        from ..core import Decider

        decider = Decider.load(config.model)
    app = Flask("decide.server")
    app.config.update(MAX_CONTENT_LENGTH=config.max_body_bytes, PROVIDE_AUTOMATIC_OPTIONS=False)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    limits = Limits(config.max_questions, fetch_remote if config.fetch_remote_images else None)
    app.extensions["decide"] = State(
        config, decider, limits, threading.BoundedSemaphore(config.max_pending), time.time()
    )
    app.before_request(_before)
    app.after_request(_after)
    app.register_error_handler(Exception, _on_error)
    _routes(app)
    return app


def _state() -> State:
    return current_app.extensions["decide"]


# ---------------------------------------------------------------- hooks


def _before() -> None:
    g.request_id = "req_" + uuid.uuid4().hex
    key = _state().config.api_key
    if key and request.url_rule is not None and request.path.startswith("/v1"):
        _check_key(request.headers.get("Authorization", ""), key)


def _check_key(header: str, key: str) -> None:
    """Only `Authorization: Bearer <key>` counts (constant-time compare); the body is not read yet."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(missing=True)
    if not hmac.compare_digest(token.strip().encode("utf-8"), key.encode("utf-8")):
        raise Unauthorized(missing=False)


def _after(response: Response) -> Response:
    rid = g.get("request_id") or "req_" + uuid.uuid4().hex
    response.headers["x-request-id"] = rid
    response.headers["x-typesafe-request-id"] = rid
    return response


def _on_error(exc: Exception) -> Response:
    problem = problem_for(exc, family(request.path), g.get("image_params"))
    if problem.status >= 500:
        log.error("request %s %s %s failed", g.get("request_id"), request.method, request.path, exc_info=exc)
    else:
        log.debug("request %s: %s %s", g.get("request_id"), problem.status, problem.message)
    try:
        return problem.shape(family(request.path))
    except ValueError:  # a non-finite number in an error message's data: never let the handler fail
        return json_response(
            {"error": {"message": "internal error", "type": "server_error", "param": None, "code": None}}, 500
        )


# ---------------------------------------------------------------- routes


def _routes(app: Flask) -> None:
    app.add_url_rule("/v1/decisions", "decisions", _decisions, methods=["POST"])
    app.add_url_rule("/v1/systemone", "systemone", _systemone, methods=["POST"])
    app.add_url_rule("/v1/models", "models", _models, methods=["GET"])
    app.add_url_rule("/v1", "index", _index, methods=["GET"])
    app.add_url_rule("/health", "health", _health, methods=["GET"])


def _decisions() -> Response:
    state = _state()
    parsed = openai.parse(loads_object(_read_body()), limits=state.limits)
    g.image_params = parsed.image_params
    _check_model(parsed.model)
    return json_response(openai.render(_decide(parsed.request), parsed))


def _systemone() -> Response:
    state = _state()
    raw = _read_body()
    content_type = request.headers.get("Content-Type", "")
    parts = None
    if is_multipart(content_type):
        body, parts = systemone.split_form(parse_multipart(raw, content_type))
    elif content_type.strip().lower().startswith("multipart/"):
        raise UnsupportedMediaType(
            f"unsupported Content-Type {content_type!r}; send application/json or multipart/form-data"
        )
    else:
        body = loads_strict(raw)
    parsed = systemone.parse(body, parts=parts, limits=state.limits)
    _check_model(parsed.model)
    return json_response(systemone.render(_decide(parsed.request), parsed))


def _models() -> Response:
    state = _state()
    started = int(state.started)
    day = datetime.fromtimestamp(started, timezone.utc).strftime("%Y-%m-%d")
    return json_response(models_body(state.decider.model_id, state.config.aliases, started, day))


def _index() -> Response:
    return json_response({"object": "list", "data": ROUTES})


def _health() -> Response:
    decider = _state().decider
    info: dict[str, Any] = {"status": "ok", "model": decider.model_id, **dict(decider.info)}
    info["supports_images"] = bool(decider.supports_images)
    return json_response(info)


# ---------------------------------------------------------------- helpers


def _read_body() -> bytes:
    """The decoded body, capped before and after Content-Encoding is undone."""
    cap = _state().config.max_body_bytes
    if request.content_length is not None and request.content_length > cap:
        raise BodyTooLarge(f"request body is larger than {cap} bytes")
    raw = request.stream.read(cap + 1)
    if len(raw) > cap:
        raise BodyTooLarge(f"request body is larger than {cap} bytes")
    return decode_body(raw, request.headers.get("Content-Encoding"), cap)


def _check_model(name: str) -> None:
    state = _state()
    if state.config.strict_models and name not in state.accepted_models():
        raise UnknownModel(name)


def _decide(req: DecisionRequest) -> Decision:
    state = _state()
    found = req.images
    if found and not state.decider.supports_images:
        path, _ = found[0]
        raise UnsupportedInput(f"model {state.decider.model_id} reads text only and cannot take images", path)
    if not state.admission.acquire(blocking=False):
        raise Overloaded()
    try:
        return state.decider.decide(req)
    finally:
        state.admission.release()
