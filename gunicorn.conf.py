"""`gunicorn wsgi:app` reads this file: the settings live in the package (decide serve uses them too)."""

from decide.server.gunicorn_config import *  # noqa: F403
