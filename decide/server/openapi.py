"""The OpenAPI 3.1 document of the two decision routes, served at `GET /openapi.json`.

Written from contract.md §1–§2. It is no stricter than the server (unknown fields are allowed,
as the server ignores them), so a body it calls invalid is one the server refuses with a 4xx;
some rules JSON Schema cannot state (tool outputs must follow their call, choice values are
unique by type, images must decode, the prompt must fit the context) are the server's alone.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from .. import __version__
from ..limits import (
    JSON_MAX_BYTES,
    JSON_MAX_DEPTH,
    JSON_MAX_VALUES,
    MAX_ID_LENGTH,
    MAX_OPTIONS,
    MAX_QUESTIONS,
    MAX_TEXT,
    OPENAI_MIN_OPTIONS,
    SYSTEMONE_MAX_LEVELS,
)

REF = "#/components/schemas/"


def _ref(name: str) -> dict:
    return {"$ref": REF + name}


def _obj(required: list[str], **props: Any) -> dict:
    return {"type": "object", "required": required, "properties": props}


def _const(value: str) -> dict:
    return {"type": "string", "const": value}


def _text() -> dict:
    return {"type": "string", "maxLength": MAX_TEXT}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


# ---------------------------------------------------------------- OpenAI Decisions


def _openai_parts() -> dict[str, dict]:
    breakpoint_ = _nullable(_obj(["mode"], mode=_const("explicit")))
    detail = {"enum": ["low", "high", "auto", "original", None]}
    return {
        "InputText": _obj(
            ["type", "text"], type=_const("input_text"), text=_text(), prompt_cache_breakpoint=breakpoint_
        ),
        "InputImage": _obj(
            ["type", "image_url"],
            type=_const("input_image"),
            image_url={"type": "string", "description": "a base64 data: URL (http(s) only when fetching is on)"},
            detail=detail,
            prompt_cache_breakpoint=breakpoint_,
        ),
        "InputJson": _obj(
            ["type", "data"],
            type=_const("input_json"),
            data={
                "description": f"≤ {JSON_MAX_DEPTH} levels, ≤ {JSON_MAX_VALUES:,} values, ≤ {JSON_MAX_BYTES // 1024} KiB as compact JSON",
                "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}],
            },
        ),
        # Question instructions take no cache breakpoints (contract §1.4).
        "QuestionText": _obj(["type", "text"], type=_const("input_text"), text=_text()),
        "QuestionImage": _obj(
            ["type", "image_url"], type=_const("input_image"), image_url={"type": "string"}, detail=detail
        ),
        "OutputText": _obj(["type", "text"], type=_const("output_text"), text=_text()),
        "Refusal": _obj(["type", "refusal"], type=_const("refusal"), refusal=_text()),
    }


def _content(*parts: str) -> dict:
    return {"anyOf": [_text(), {"type": "array", "minItems": 1, "items": {"anyOf": [_ref(p) for p in parts]}}]}


def _openai_items() -> dict[str, dict]:
    message = {"type": "string", "const": "message"}
    status = {"enum": ["in_progress", "completed", "incomplete"]}
    output = _content("InputText", "InputImage")
    return {
        "UserMessage": _obj(
            ["role", "content"],
            type=message,
            role=_const("user"),
            content=_content("InputText", "InputImage", "InputJson"),
        ),
        "SystemMessage": _obj(
            ["role", "content"],
            type=message,
            role={"enum": ["system", "developer"]},
            content=_content("InputText"),
        ),
        "AssistantMessage": _obj(
            ["role", "content"],
            type=message,
            role=_const("assistant"),
            content=_content("OutputText", "Refusal"),
            phase={"enum": ["commentary", "final_answer", None]},
        ),
        "FunctionCall": _obj(
            ["type", "call_id", "name", "arguments"],
            type=_const("function_call"),
            call_id={"type": "string"},
            name={"type": "string"},
            arguments=_text(),
            status=status,
        ),
        "FunctionCallOutput": _obj(
            ["type", "call_id", "output"],
            type=_const("function_call_output"),
            call_id={"type": "string", "description": "a function_call earlier in input"},
            output=output,
            status=status,
        ),
        "CustomToolCall": _obj(
            ["type", "call_id", "name", "input"],
            type=_const("custom_tool_call"),
            call_id={"type": "string"},
            name={"type": "string"},
            input=_text(),
            status=status,
        ),
        "CustomToolCallOutput": _obj(
            ["type", "call_id", "output"],
            type=_const("custom_tool_call_output"),
            call_id={"type": "string", "description": "a custom_tool_call earlier in input"},
            output=output,
            status=status,
        ),
    }


def _openai_questions() -> dict[str, dict]:
    instructions = _content("QuestionText", "QuestionImage", "InputJson")
    name = {"type": ["string", "null"]}
    choice = _obj(["value"], value={"type": ["string", "boolean"]}, description=_nullable(_text()))
    level = _obj(["label"], label=_text(), description=_nullable(_text()))
    return {
        "Question": {
            "anyOf": [
                _obj(["type", "instructions"], type=_const("predicate"), instructions=instructions, name=name),
                _obj(
                    ["type", "instructions", "choices"],
                    type=_const("choice"),
                    instructions=instructions,
                    name=name,
                    choices={"type": "array", "minItems": OPENAI_MIN_OPTIONS, "maxItems": MAX_OPTIONS, "items": choice},
                ),
                _obj(
                    ["type", "instructions", "levels"],
                    type=_const("score"),
                    instructions=instructions,
                    name=name,
                    levels={"type": "array", "minItems": OPENAI_MIN_OPTIONS, "maxItems": MAX_OPTIONS, "items": level},
                ),
            ]
        }
    }


def _openai_bodies() -> dict[str, dict]:
    items = ["UserMessage", "SystemMessage", "AssistantMessage", "FunctionCall", "FunctionCallOutput"]
    items += ["CustomToolCall", "CustomToolCallOutput"]
    cache_options = _nullable(_obj([], mode={"enum": ["implicit", "explicit", None]}, ttl={"enum": ["30m", None]}))
    request = _obj(
        ["model", "input", "questions"],
        model={"type": "string"},
        input={"anyOf": [_text(), {"type": "array", "minItems": 1, "items": {"anyOf": [_ref(i) for i in items]}}]},
        questions={"type": "array", "minItems": 1, "maxItems": MAX_QUESTIONS, "items": _ref("Question")},
        prompt_cache_key=_nullable({"type": "string", "maxLength": MAX_ID_LENGTH}),
        prompt_cache_options=cache_options,
        safety_identifier=_nullable({"type": "string", "maxLength": MAX_ID_LENGTH}),
    )
    p = {"type": "number", "minimum": 0, "maximum": 1}
    name = {"type": ["string", "null"]}
    answer = {
        "anyOf": [
            _obj(["type", "name", "probability"], type=_const("predicate"), name=name, probability=p),
            _obj(
                ["type", "name", "choice", "confidence", "probabilities"],
                type=_const("choice"),
                name=name,
                choice={"type": ["string", "boolean"]},
                confidence=p,
                probabilities={
                    "type": "array",
                    "items": _obj(["value", "probability"], value={"type": ["string", "boolean"]}, probability=p),
                },
            ),
            _obj(
                ["type", "name", "score", "confidence", "probabilities"],
                type=_const("score"),
                name=name,
                score={"type": "number", "minimum": 0},
                confidence=p,
                probabilities={
                    "type": "array",
                    "items": _obj(
                        ["value", "label", "probability"],
                        value={"type": "integer", "minimum": 0},
                        label={"type": "string"},
                        probability=p,
                    ),
                },
            ),
            _obj(["type", "name"], type=_const("refusal"), name=name),
        ]
    }
    count = {"type": "integer", "minimum": 0}
    usage = _obj(
        ["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"],
        input_tokens=count,
        input_tokens_details=_obj(
            ["cached_tokens", "cache_write_tokens"], cached_tokens=count, cache_write_tokens=count
        ),
        output_tokens=count,
        output_tokens_details=_obj(["reasoning_tokens"], reasoning_tokens=count),
        total_tokens=count,
    )
    response = _obj(
        ["model", "answers", "usage"], model={"type": "string"}, answers={"type": "array", "items": answer}, usage=usage
    )
    response["additionalProperties"] = False
    error = _obj(
        ["error"],
        error=_obj(
            ["message", "type", "param", "code"],
            message={"type": "string"},
            type={"type": "string"},
            param={"type": ["string", "null"]},
            code={"type": ["string", "null"]},
        ),
    )
    return {"DecisionsRequest": request, "DecisionsResponse": response, "OpenAIError": error}


# ---------------------------------------------------------------- TypeSafe System One

_SO_TEXT = {"type": ["string", "object", "array"], "description": "text; objects and arrays are shown as compact JSON"}


def _systemone() -> dict[str, dict]:
    instructions = {"type": ["string", "object", "array", "null"]}
    question = {
        "anyOf": [
            _obj(
                ["type"],
                type=_const("noul"),
                instructions=instructions,
                criteria={
                    "type": ["object", "null"],
                    "properties": {"true": instructions, "false": instructions},
                },
            ),
            _obj(
                ["type", "criteria"],
                type=_const("choice"),
                instructions=instructions,
                criteria={
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": MAX_OPTIONS,
                    "additionalProperties": instructions,
                },
            ),
            _obj(
                ["type", "criteria"],
                type=_const("score"),
                instructions=instructions,
                criteria={"type": "array", "minItems": 1, "maxItems": SYSTEMONE_MAX_LEVELS, "items": _SO_TEXT},
            ),
        ]
    }
    asset = _obj(
        [],
        type=_const("image"),
        format={"enum": ["png", "jpg", "jpeg"]},
        data_base64={"type": "string"},
        part={"type": "string", "description": "a multipart part's name"},
    )
    request = _obj(
        ["model", "state", "questions"],
        model={"type": "string", "examples": ["jev-latest"]},
        state=_SO_TEXT,
        questions={
            "type": "object",
            "minProperties": 1,
            "maxProperties": MAX_QUESTIONS,
            "additionalProperties": question,
        },
        assets={
            "type": ["object", "null"],
            "minProperties": 1,
            "description": "placeholder → image; every asset must be referenced in the state or a question",
            "additionalProperties": asset,
        },
    )
    p = {"type": "number", "minimum": 0, "maximum": 1}
    answer = {
        "anyOf": [
            _obj(["type", "noul"], type=_const("noul"), noul=p),
            _obj(
                ["type", "choice", "confidence", "probabilities"],
                type=_const("choice"),
                choice={"type": "string"},
                confidence=p,
                probabilities={"type": "object", "additionalProperties": p},
            ),
            _obj(
                ["type", "score", "confidence", "legend", "probabilities"],
                type=_const("score"),
                score={"type": "number", "minimum": 0},
                confidence=p,
                legend={"type": "object", "additionalProperties": _SO_TEXT},
                probabilities={"type": "object", "additionalProperties": p},
            ),
        ]
    }
    count = {"type": "integer", "minimum": 0}
    response = _obj(
        ["model", "answers", "usage"],
        model={"type": "string"},
        answers={"type": "object", "additionalProperties": answer},
        usage=_obj(["input_tokens", "output_tokens"], input_tokens=count, output_tokens=count),
    )
    response["patternProperties"] = {"^x_": {}}
    response["additionalProperties"] = False
    detail_object = _obj(
        ["detail"], detail=_obj(["error_type", "message"], error_type={"type": "string"}, message={"type": "string"})
    )
    entry = _obj(
        ["loc", "msg", "type"],
        loc={"type": "array", "minItems": 1, "items": {"type": ["string", "integer"]}},
        msg={"type": "string"},
        type={"type": "string"},
    )
    validation = _obj(["detail"], detail={"type": "array", "minItems": 1, "items": entry})
    return {
        "SystemOneRequest": request,
        "SystemOneResponse": response,
        "SystemOneError": detail_object,
        "SystemOneValidationError": validation,
    }


# ---------------------------------------------------------------- paths


_OPENAI_ERRORS = {
    "400": "invalid request (code and param say where), context length exceeded, token budget exceeded",
    "401": "missing or wrong API key (auth on)",
    "403": "Host or Origin not allowed",
    "404": "unknown model (strict mode)",
    "413": "body over the size cap (after zstd decoding too)",
    "415": "unsupported Content-Encoding",
    "429": "queue full: retry after Retry-After seconds",
    "431": "too many or too large request headers",
    "500": "model or runtime failure",
    "503": "model loading, or the request waited past its deadline: retry after Retry-After seconds",
}
_SYSTEMONE_ERRORS = {
    "400": "unsupported question (box), images on a text-only model, context length or token budget exceeded",
    "401": "wrong API key (auth on)",
    "403": "missing API key (auth on); Host or Origin not allowed",
    "413": "body over the size cap (after zstd decoding too)",
    "415": "unsupported Content-Encoding or Content-Type",
    "422": "validation failed (every error found, with its location)",
    "429": "queue full: retry after Retry-After seconds",
    "431": "too many or too large request headers",
    "500": "model or runtime failure",
    "503": "model loading, or the request waited past its deadline: retry after Retry-After seconds",
}
_RETRY = {
    "Retry-After": {"schema": {"type": "string", "pattern": "^[0-9]+$"}, "required": True},
    "retry-after-ms": {"schema": {"type": "string", "pattern": "^[0-9]+$"}, "required": True},
}


def _responses(ok: str, errors: dict[str, str], error_schema: str, validation: str | None = None) -> dict:
    out: dict[str, Any] = {"200": {"description": "the answers", "content": _json(ok)}}
    for status, text in errors.items():
        schema = validation if status == "422" and validation else error_schema
        out[status] = {"description": text, "content": _json(schema)}
        if status in ("429", "503"):
            out[status]["headers"] = _RETRY
    return out


def _json(schema: str) -> dict:
    return {"application/json": {"schema": _ref(schema)}}


@cache
def openapi_document() -> dict:
    schemas = {**_openai_parts(), **_openai_items(), **_openai_questions(), **_openai_bodies(), **_systemone()}
    systemone_body = {
        "application/json": {"schema": _ref("SystemOneRequest")},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["request"],
                "properties": {"request": _ref("SystemOneRequest")},
                "additionalProperties": {"type": "string", "format": "binary"},
            },
            "encoding": {"request": {"contentType": "application/json"}},
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "decide",
            "version": __version__,
            "description": "A local decision server: OpenAI Decisions and TypeSafe System One over one model. "
            "With DECIDE_API_KEY set, every /v1 route needs 'Authorization: Bearer <key>'. Bodies may be "
            "zstd-encoded (Content-Encoding: zstd).",
        },
        "paths": {
            "/v1/decisions": {
                "post": {
                    "operationId": "createDecision",
                    "summary": "OpenAI Decisions: probabilities for typed questions about an input",
                    "requestBody": {"required": True, "content": _json("DecisionsRequest")},
                    "responses": _responses("DecisionsResponse", _OPENAI_ERRORS, "OpenAIError"),
                }
            },
            "/v1/systemone": {
                "post": {
                    "operationId": "systemOne",
                    "summary": "TypeSafe System One: noul, choice and score questions about a state",
                    "requestBody": {"required": True, "content": systemone_body},
                    "responses": _responses(
                        "SystemOneResponse", _SYSTEMONE_ERRORS, "SystemOneError", "SystemOneValidationError"
                    ),
                }
            },
        },
        "components": {"schemas": schemas},
    }
