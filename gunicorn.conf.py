"""gunicorn settings for `gunicorn wsgi:app` (every value can be changed through the environment).

One worker holds one model; a few threads let requests queue while the model is busy.
`timeout` must outlive loading the model (the first run converts the embedded GGUF, ~2 min)
and the slowest accepted request on a slow CPU.
"""

import os

bind = os.environ.get("DECIDE_BIND", "127.0.0.1:8000")
workers = 1
worker_class = "gthread"
threads = int(os.environ.get("DECIDE_THREADS", "4"))
timeout = int(os.environ.get("DECIDE_WORKER_TIMEOUT", "600"))
graceful_timeout = int(os.environ.get("DECIDE_GRACEFUL_TIMEOUT", "30"))
keepalive = int(os.environ.get("DECIDE_KEEPALIVE", "75"))
loglevel = os.environ.get("DECIDE_LOG_LEVEL", "info")
accesslog = os.environ.get("DECIDE_ACCESS_LOG") or None
