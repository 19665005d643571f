"""`gunicorn wsgi:app`: the server on the model named by DECIDE_MODEL, loaded in the background."""

from decide.server import create_app

app = create_app()
