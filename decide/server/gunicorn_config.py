"""gunicorn settings for `decide serve` and `gunicorn wsgi:app` (every value can be changed through the environment).

One worker holds one model; its engine thread runs the model, and the worker's threads parse
bodies and wait in the engine's bounded queue. There must be more threads than the queue holds
(DECIDE_MAX_PENDING) plus one batch, or requests would wait inside gunicorn where no 429 reaches
them. The model loads in the background, so `timeout` (the heartbeat of a stuck worker) does not
have to outlive a model conversion. Do not preload the app: the engine thread must start in the
worker, after the fork.
"""

import os

bind = os.environ.get("DECIDE_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("DECIDE_WORKERS", "1"))  # each worker loads its own copy of the model
worker_class = "gthread"
threads = int(os.environ.get("DECIDE_THREADS") or int(os.environ.get("DECIDE_MAX_PENDING") or 32) + 16)
timeout = int(os.environ.get("DECIDE_WORKER_TIMEOUT", "600"))
graceful_timeout = int(os.environ.get("DECIDE_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("DECIDE_KEEPALIVE", "75"))
loglevel = os.environ.get("DECIDE_LOG_LEVEL", "info")
accesslog = os.environ.get("DECIDE_ACCESS_LOG") or None  # gunicorn's own line; decide.access logs JSON anyway
# gunicorn's own caps on the request head; the app's smaller DECIDE_MAX_HEADERS / _HEADER_BYTES answer first.
limit_request_line = 8190
limit_request_fields = 1000
limit_request_field_size = 8190


def post_fork(server, worker):
    """In the new worker, before the app loads: JSON for gunicorn's own errors and decide's log
    lines (create_app tunes malloc)."""
    import logging

    from decide.server.hardening import install_gunicorn_json_errors

    install_gunicorn_json_errors()
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s [%(process)d] [%(levelname)s] %(name)s: %(message)s"))
    logger = logging.getLogger("decide")
    logger.addHandler(handler)
    logger.setLevel(loglevel.upper())
    logger.propagate = False
