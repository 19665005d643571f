"""The WSGI app of `decide serve` and `gunicorn wsgi:app`: the server on DECIDE_MODEL, loaded in the background."""

from decide.server import create_app

app = create_app()
