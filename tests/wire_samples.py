"""Sample bodies, images and small helpers shared by the wire and server tests."""

from __future__ import annotations

import base64
import copy
import struct
import zlib
from typing import Any

from fake_decider import FakeDecider

from decide.server import ServerConfig, create_app

DELETE = object()


def png(width: int = 1, height: int = 1) -> bytes:
    """A real (tiny, grey) PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 16 + b"\xff\xd9"
GIF = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"
WEBP = b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00"


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


PNG_URL = data_url(png())


def openai_body(**top: Any) -> dict:
    body = {
        "model": "gpt-6-luna",
        "input": "I was charged twice for my March invoice. Please refund me.",
        "questions": [
            {"type": "predicate", "name": "refund", "instructions": "Is this a refund request?"},
            {
                "type": "choice",
                "name": "team",
                "instructions": "Which team should take it?",
                "choices": [
                    {"value": "billing"},
                    {"value": "technical", "description": "Bugs and outages"},
                    {"value": True},
                ],
            },
            {
                "type": "score",
                "name": "anger",
                "instructions": "How angry is the customer?",
                "levels": [{"label": "Calm"}, {"label": "Annoyed"}, {"label": "Angry", "description": "Shouting"}],
            },
        ],
    }
    return {**body, **top}


def systemone_body(**top: Any) -> dict:
    body = {
        "model": "jev-latest",
        "state": "I was charged twice for my March invoice. Please refund me.",
        "questions": {
            "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
            "team": {
                "type": "choice",
                "instructions": "Which team should handle this ticket?",
                "criteria": {"Billing": "Payments, invoices, refunds", "Technical": None, "Sales": "Pricing"},
            },
            "anger": {
                "type": "score",
                "instructions": "How frustrated is the customer?",
                "criteria": ["Calm", "Frustrated", "Very angry"],
            },
        },
    }
    return {**body, **top}


def with_path(body: dict, path: tuple, value: Any) -> dict:
    """A deep copy of `body` with the value at `path` replaced (or removed with DELETE)."""
    out = copy.deepcopy(body)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


def make_app(decider: FakeDecider | None = None, **config: Any):
    return create_app(ServerConfig(**config), decider=decider or FakeDecider())
