"""The Flask app: every wire protocol (decide.wire.PROTOCOLS) over one engine that owns the decider.

    app = create_app()                                  # loads Decider.load(DECIDE_MODEL) in the background
    app = create_app(ServerConfig(api_key="k"), decider=my_fake)   # tests

A request: guard (Host, Origin, header sizes) → key → body (size caps, zstd, JSON depth) →
protocol parse → its server caps → engine.prepare (tokenize, context check) → queue → decide_batch → render.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from flask import Flask, Response, current_app, g, request

from ..answers import Decision
from ..request import DecisionRequest
from ..wire import PROTOCOLS
from ..wire.common import OPENAI_ALIAS, SYSTEMONE_ALIAS, BodyTooLarge, Limits, decode_body, models_body
from ..wire.images import fetch_remote
from ..wire.protocol import Protocol, Unauthorized, UnknownModel
from . import playground
from .config import ServerConfig
from .engine import DeciderLike, Engine, EngineOptions, conversion_progress
from .errors import BudgetExceeded, Unavailable, json_response, respond
from .hardening import Guard, check_json, client_alive
from .memory import cap_mlx_cache, tame_malloc
from .metrics import Metrics, log_access
from .openapi import openapi_document

log = logging.getLogger("decide.server")

DRAIN_SECONDS = 10.0
WRITING_MARGIN_S = 5.0  # of a client's read timeout, kept for the answer after the examples are written

OTHER_ROUTES = [
    {"method": "GET", "path": "/v1/models", "protocol": "OpenAI + TypeSafe"},
    {"method": "GET", "path": "/v1", "protocol": "route index"},
    {"method": "GET", "path": "/health", "protocol": "server status"},
    {"method": "GET", "path": "/metrics", "protocol": "Prometheus text format"},
    {"method": "GET", "path": "/openapi.json", "protocol": "OpenAPI 3.1"},
    {"method": "GET", "path": "/", "protocol": "playground (HTML page)"},
]


@dataclass
class State:
    """What the app keeps in `app.extensions["decide"]`."""

    config: ServerConfig
    engine: Engine
    metrics: Metrics
    guard: Guard
    limits: Limits
    started: float


def create_app(
    config: ServerConfig | None = None,
    decider: DeciderLike | None = None,
    *,
    load: Callable[[], DeciderLike] | None = None,
) -> Flask:
    """The WSGI app. Without a decider, `load` (default: Decider.load(config.model)) runs in the
    engine thread; with background_load off it runs here, so a bad model fails at start-up."""
    config = config or ServerConfig.from_env()
    if config.tune_malloc:
        # Here, not in gunicorn's post_fork: this runs in every way the app is served (a gunicorn
        # worker after the fork, `flask run`, tests), before the engine and request threads start.
        tame_malloc()
    load = load or _loader(config)
    if decider is None and not config.background_load:
        decider = load()
    metrics = Metrics()
    engine = Engine(
        EngineOptions(
            config.max_pending,
            config.batch_max_tokens,
            config.batch_max_questions,
            config.retry_after_s,
            config.writing_wait_s,
        ),
        decider=decider,
        load=load,
        observer=metrics,
        on_load_error=_exit_process if config.exit_on_load_error else None,
    )
    metrics.watch(engine)
    app = Flask("decide.server")
    app.config.update(MAX_CONTENT_LENGTH=config.max_body_bytes, PROVIDE_AUTOMATIC_OPTIONS=False)
    app.json.sort_keys = False  # type: ignore[attr-defined]
    limits_ = Limits(config.max_questions, fetch_remote if config.fetch_remote_images else None)
    app.extensions["decide"] = State(config, engine, metrics, Guard(config), limits_, time.time())
    app.before_request(_before)
    app.after_request(_after)
    app.register_error_handler(Exception, _on_error)
    _routes(app)
    engine.start()
    return app


def _loader(config: ServerConfig) -> Callable[[], DeciderLike]:
    def load() -> DeciderLike:
        from ..core import Decider, DeciderOptions

        options = None
        if config.prefix_cache_bytes is not None:
            options = DeciderOptions().with_prefix_cache(config.prefix_cache_bytes)
        decider = Decider.load(config.model, options)
        cap_mlx_cache(config.mlx_cache_bytes)
        return decider

    return load


def _exit_process(exc: BaseException) -> None:
    """No model, nothing to serve: end the worker with gunicorn's "App failed to load" code, so
    gunicorn stops with the reason in its log instead of restarting a worker that cannot load."""
    for handler in [*logging.getLogger().handlers, *logging.getLogger("decide").handlers]:
        handler.flush()
    print(f"decide: the model failed to load: {exc}", file=sys.stderr, flush=True)
    os._exit(4)


def _state() -> State:
    return current_app.extensions["decide"]


# ---------------------------------------------------------------- hooks


def _before() -> None:
    g.request_id = "req_" + uuid.uuid4().hex
    g.started = time.perf_counter()
    g.obs = {}
    state = _state()
    state.guard.check(request.method, request.headers.items())
    key = state.config.api_key
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
    """Request ids, metrics and the access-log line. Only the matched route's pattern is a label (bounded)."""
    _drain_body()
    rid = g.get("request_id") or "req_" + uuid.uuid4().hex
    response.headers["x-request-id"] = rid
    response.headers["x-typesafe-request-id"] = rid
    seconds = time.perf_counter() - g.get("started", time.perf_counter())
    route = request.url_rule.rule if request.url_rule is not None else "unmatched"
    _state().metrics.request_done(route, response.status_code, seconds)
    record = {"request_id": rid, "method": request.method, "route": route, "status": response.status_code}
    record.update(g.get("obs") or {})
    record["duration_ms"] = round(seconds * 1000, 2)
    log_access(record)
    return response


def _on_error(exc: Exception) -> Response:
    protocol = next((p for p in PROTOCOLS if p.path == request.path), None)
    image_params = getattr(g.get("parsed"), "image_params", None)
    try:
        response = respond(exc, protocol, image_params)
    except ValueError:  # a non-finite number in an error message's data: never let the handler fail
        response = json_response(
            {"error": {"message": "internal error", "type": "server_error", "param": None, "code": None}}, 500
        )
    if response.status_code >= 500 and not isinstance(exc, Unavailable):
        log.error("request %s %s %s failed", g.get("request_id"), request.method, request.path, exc_info=exc)
    else:
        log.debug("request %s: %s %s", g.get("request_id"), response.status_code, exc)
    return response


# ---------------------------------------------------------------- routes


def _routes(app: Flask) -> None:
    for protocol in PROTOCOLS:
        app.add_url_rule(protocol.path, protocol.path, _decision_route(protocol), methods=["POST"])
    app.add_url_rule("/v1/models", "models", _models, methods=["GET"])
    app.add_url_rule("/v1", "index", _index, methods=["GET"])
    app.add_url_rule("/health", "health", _health, methods=["GET"])
    app.add_url_rule("/metrics", "metrics", _metrics, methods=["GET"])
    app.add_url_rule("/openapi.json", "openapi", _openapi, methods=["GET"])
    playground.register(app)


def _decision_route(protocol: Protocol) -> Callable[[], Response]:
    def route() -> Response:
        state = _state()
        state.engine.ready_decider()  # 503 while loading, before the body is read
        body, parts = protocol.read(_read_body(), request.headers.get("Content-Type", ""))
        check_json(body, state.config.max_json_depth)
        g.parsed = parsed = protocol.parse(body, parts, state.limits)
        _check_model(parsed.model)
        protocol.check_caps(parsed, state.config.max_options, state.config.max_images)
        return json_response(protocol.render(_decide(parsed.request), parsed))

    return route


def _models() -> Response:
    state = _state()
    decider = state.engine.ready_decider()
    started = int(state.started)
    day = datetime.fromtimestamp(started, timezone.utc).strftime("%Y-%m-%d")
    return json_response(models_body(decider.model_id, state.config.aliases, started, day))


def _index() -> Response:
    decisions = [{"method": "POST", "path": p.path, "protocol": p.title} for p in PROTOCOLS]
    return json_response({"object": "list", "data": decisions + OTHER_ROUTES})


def _health() -> Response:
    """Liveness: 200 while loading (with progress) and when ready; 503 once the model failed to load."""
    engine = _state().engine
    base: dict[str, Any] = {"pid": os.getpid(), "queue_depth": engine.queue_depth, "running": engine.running}
    if engine.phase == "ready" and engine.decider is not None:
        decider = engine.decider
        info = {"status": "ok", "model": decider.model_id, **dict(decider.info)}
        return json_response({**info, "supports_images": bool(decider.supports_images), **base})
    if engine.phase == "failed":
        return json_response({"status": "failed", "error": engine.load_error, **base}, 503)
    elapsed = round(time.monotonic() - engine.load_started, 1)
    return json_response({"status": "loading", "elapsed_s": elapsed, "progress": conversion_progress(), **base})


def _metrics() -> Response:
    return Response(_state().metrics.render(), mimetype="text/plain; version=0.0.4")


def _openapi() -> Response:
    return json_response(openapi_document())


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


def _drain_body() -> None:
    """Read and drop what is left of the request body (for at most DRAIN_SECONDS). gunicorn drains
    only 64 KiB of an unread body (a 413, a 401 before the body...) and then closes a connection it
    answered as keep-alive, which a client that reuses it sees as a dropped connection."""
    stream = request.environ.get("wsgi.input")
    stop = time.monotonic() + DRAIN_SECONDS
    try:
        while stream is not None and time.monotonic() < stop and stream.read(1 << 20):
            pass
    except Exception:  # the client is gone or sent a broken chunk: gunicorn closes the connection anyway
        pass


def _check_model(name: str) -> None:
    state = _state()
    served = state.engine.ready_decider().model_id
    if state.config.strict_models and name not in {served, OPENAI_ALIAS, SYSTEMONE_ALIAS, *state.config.aliases}:
        raise UnknownModel(name)


def _decide(req: DecisionRequest) -> Decision:
    """Prepare in this thread (a request that cannot fit is refused before it queues), then wait
    for the engine. The deadline bounds the wait in the queue, not the compute."""
    state = _state()
    engine = state.engine
    g.obs["questions"] = len(req.questions)
    work = engine.prepare(req)
    if work.exact and work.tokens > state.config.max_request_tokens:
        raise BudgetExceeded(
            f"the request has {work.tokens} input tokens; this server takes at most {state.config.max_request_tokens}"
        )
    alive = client_alive(request.environ.get("gunicorn.socket"))
    job = engine.submit(work, _deadline(state.config), alive, _writing_wait(state.config))
    try:
        decision = engine.wait(job)
    finally:
        g.obs.update(
            queue_ms=round(job.queue_seconds * 1000, 2),
            compute_ms=round(job.compute_seconds * 1000, 2),
            batch=job.batch_size,
        )
    g.obs.update(input_tokens=decision.usage.input_tokens, cached_tokens=decision.usage.cached_tokens)
    return decision


def _deadline(config: ServerConfig) -> float:
    """Now + the configured deadline, shortened by the OpenAI SDK's own read timeout if it sent one."""
    client = _client_timeout()
    return time.monotonic() + (client if 0 < client < config.deadline_s else config.deadline_s)


def _writing_wait(config: ServerConfig) -> float:
    """How long the request may wait for its new questions' examples: the configured wait, or, if longer, the OpenAI
    SDK's own read timeout less WRITING_MARGIN_S (the time to answer once they are written)."""
    return max(config.writing_wait_s, _client_timeout() - WRITING_MARGIN_S)


def _client_timeout() -> float:
    """The read timeout the OpenAI SDK says it has (x-stainless-read-timeout), in seconds; 0 if none."""
    try:
        client = float(request.headers.get("x-stainless-read-timeout", ""))
    except ValueError:
        return 0.0
    return client if math.isfinite(client) else 0.0
