"""The playground at `/`: one static page (decide/server/playground/) that asks the server's own API.

The page calls POST /v1/decisions from the browser, so it passes through the same Host/Origin
guard and API key as any client; it is told only whether a key is needed, never the key.
"""

from __future__ import annotations

from importlib.resources import files

from flask import Flask, Response, abort, current_app

ASSETS = {"playground.js": "text/javascript", "playground.css": "text/css"}
# The page loads its own files only and may not be framed (no clickjacking of the Submit button).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def register(app: Flask) -> None:
    app.add_url_rule("/", "playground", _page, methods=["GET"])
    app.add_url_rule("/playground/<name>", "playground_asset", _asset, methods=["GET"])


def _read(name: str) -> str:
    return (files("decide.server") / "playground" / name).read_text(encoding="utf-8")


def _page() -> Response:
    key_required = bool(current_app.extensions["decide"].config.api_key)
    html = _read("index.html").replace("{{key_required}}", "true" if key_required else "false")
    return _response(html, "text/html")


def _asset(name: str) -> Response:
    if name not in ASSETS:
        abort(404)
    return _response(_read(name), ASSETS[name])


def _response(text: str, mimetype: str) -> Response:
    response = Response(text, mimetype=mimetype)
    response.headers.update(SECURITY_HEADERS)
    response.headers["Cache-Control"] = "no-cache"
    return response
