"""Defences that do not depend on the protocol: Host/Origin, header limits, JSON depth, lost clients.

DNS rebinding: a web page on evil.example can make its own name resolve to 127.0.0.1 and then
read a server bound to localhost; its requests still carry `Host: evil.example`. Cross-site
POSTs carry the page's `Origin`. So a request is served only when its Host is a loopback name,
an IP literal (never the attacker's name), the bind host or a configured name, and when its
Origin, if any, is a page of such a host or a configured origin.
"""

from __future__ import annotations

import ipaddress
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ..wire.common import MalformedBody
from ..wire.protocol import Problem
from .config import ServerConfig
from .errors import Forbidden, HeadersTooLarge, dumps, merged_body

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def host_name(host: str) -> str:
    """The name of a Host header value, lower-cased, without port or brackets or a final dot."""
    h = host.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        return h[1:end] if end > 0 else h
    name, sep, port = h.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        h = name
    return h.rstrip(".")


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    """Checks every request's Host, Origin and header sizes before anything else runs."""

    def __init__(self, config: ServerConfig) -> None:
        bind = host_name(config.bind_host) if config.bind_host else ""
        extra = [host_name(h) for h in config.allowed_hosts]
        self.any_host = "*" in config.allowed_hosts
        self.hosts = {*LOOPBACK_NAMES, *extra} | ({bind} if bind and bind not in ("0.0.0.0", "::") else set())
        self.any_origin = "*" in config.allowed_origins
        self.origins = {o.rstrip("/").lower() for o in config.allowed_origins}
        self.max_header_bytes = config.max_header_bytes
        self.max_headers = config.max_headers

    def check(self, method: str, headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        items = list(headers.items() if isinstance(headers, Mapping) else headers)
        self.check_sizes(items)
        values = {k.lower(): v for k, v in items}
        self.check_host(values.get("host"))
        self.check_origin(values.get("origin"), values.get("sec-fetch-site"), method)

    def check_sizes(self, items: list[tuple[str, str]]) -> None:
        if len(items) > self.max_headers:
            raise HeadersTooLarge(f"the request has {len(items)} headers; at most {self.max_headers} are allowed")
        size = sum(len(k) + len(v) for k, v in items)
        if size > self.max_header_bytes:
            raise HeadersTooLarge(f"the request headers are {size} bytes; at most {self.max_header_bytes} are allowed")

    def check_host(self, host: str | None) -> None:
        if host is None or self.any_host:  # HTTP/1.0 without Host: not a browser
            return
        name = host_name(host)
        if name in self.hosts or is_ip_literal(name):
            return
        raise Forbidden(
            f"Host {name!r} is not served here; add it to DECIDE_ALLOWED_HOSTS if clients use that name",
            "host_not_allowed",
        )

    def check_origin(self, origin: str | None, fetch_site: str | None, method: str) -> None:
        if origin is None:
            if (fetch_site or "").lower() == "cross-site" and method not in ("GET", "HEAD"):
                raise Forbidden("cross-site requests are not served", "origin_not_allowed")
            return
        if self.any_origin or self.origin_allowed(origin):
            return
        raise Forbidden(
            f"requests from pages of {origin!r} are not served; add it to DECIDE_ALLOWED_ORIGINS to allow them",
            "origin_not_allowed",
        )

    def origin_allowed(self, origin: str) -> bool:
        origin = origin.strip().rstrip("/").lower()
        if origin in self.origins:
            return True
        try:
            parts = urlsplit(origin)
            name = parts.hostname
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and name is not None and name.rstrip(".") in self.hosts


def check_json(value: Any, max_depth: int) -> None:
    """A parsed body nests at most `max_depth` containers deep (the top level is 1) and every string
    is valid Unicode: an escaped lone surrogate ("\\ud800") parses in Python but no tokenizer takes it."""
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    _check_text(value)
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise MalformedBody(f"the JSON body nests more than {max_depth} levels deep", loc=("body",))
        for key, child in node.items() if isinstance(node, dict) else enumerate(node):
            _check_text(key)  # a list index is no text: ignored
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
            else:
                _check_text(child)


def _check_text(value: Any) -> None:
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise MalformedBody(
                f"a JSON string holds a lone surrogate (\\u{ord(value[e.start]):04x}); send valid Unicode",
                loc=("body",),
            ) from None


def client_alive(sock: socket.socket | None) -> Callable[[], bool]:
    """A probe that turns False once the peer has closed the connection (EOF or reset).

    The body was read in full before the request queued, so readable-and-empty means the client
    left; pipelined bytes of a next request count as alive. Without a socket (tests): always alive.
    """
    if sock is None:
        return lambda: True

    def alive() -> bool:
        try:
            return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False

    return alive


def json_http_error(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP response for errors gunicorn answers itself (bad request line, huge header)."""
    rid = "req_" + uuid.uuid4().hex
    text = f"{reason}: {message}" if message else reason
    body = dumps(merged_body(Problem(status, text, category="headers" if status == 431 else "invalid"))).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nx-request-id: {rid}\r\nx-typesafe-request-id: {rid}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def install_gunicorn_json_errors() -> None:
    """Make gunicorn's own error responses JSON instead of its HTML page (call in the worker)."""
    from gunicorn import util

    def write_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
        util.write_nonblock(sock, json_http_error(status_int, reason, mesg))

    util.write_error = write_error
