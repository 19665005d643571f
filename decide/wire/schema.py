"""JSON Schema building blocks for the protocols' OpenAPI fragments (components referenced by name)."""

from __future__ import annotations

from typing import Any

from ..limits import MAX_TEXT

PROBABILITY = {"type": "number", "minimum": 0, "maximum": 1}
COUNT = {"type": "integer", "minimum": 0}


def ref(name: str) -> dict:
    return {"$ref": "#/components/schemas/" + name}


def obj(required: list[str], **props: Any) -> dict:
    return {"type": "object", "required": required, "properties": props}


def const(value: str) -> dict:
    return {"type": "string", "const": value}


def text(cap: int = MAX_TEXT) -> dict:
    return {"type": "string", "maxLength": cap}


def nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def json_content(name: str) -> dict:
    return {"application/json": {"schema": ref(name)}}
