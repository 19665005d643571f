"""`gunicorn wsgi:app`: the app lives in the package (decide/server/wsgi.py), as `decide serve` runs it."""

from decide.server.wsgi import app

__all__ = ["app"]
