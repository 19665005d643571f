"""OpenAI Decisions (`POST /v1/decisions`): body dict ⇄ DecisionRequest / Decision.

`parse` validates in document order and raises the first problem as InvalidRequest(message,
path, code); `bracket_path(path)` gives its OpenAI `param`. Non-user input items are rendered
to text ("System: …", "Tool call name [id]: …") so that a text model reads the whole
conversation; question names never reach the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property, partial
from typing import Any

from .. import kinds
from ..answers import Answer, Decision
from ..errors import InvalidRequest
from ..kinds import Choice, Predicate, QuestionKind, Score
from ..limits import (
    JSON_MAX_BYTES,
    JSON_MAX_DEPTH,
    JSON_MAX_VALUES,
    MAX_ID_LENGTH,
    MAX_IMAGES,
    MAX_OPTIONS,
    MAX_QUESTIONS,
    MAX_TEXT,
    OPENAI_MIN_OPTIONS,
)
from ..request import DEFAULT_FALSE, DEFAULT_TRUE, DecisionRequest, Image, Option, Part, Question, Text
from . import images
from .common import (
    JSONShapeError,
    Limits,
    check_json_value,
    compact_json,
    distribution,
    join_blocks,
    loads_object,
    merge_texts,
)
from .protocol import Problem, Protocol, UnknownModel
from .schema import COUNT, PROBABILITY, const, json_content, nullable, obj, ref, text

ITEM_TYPES = ("message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output")
PREFIX = {"system": "System: ", "developer": "Developer: ", "assistant": "Assistant: "}


@dataclass(frozen=True)
class Parsed:
    """A parsed body: the internal request plus what only the wire needs to answer it."""

    request: DecisionRequest
    names: tuple[str | None, ...]
    model: str
    # internal image path (as in DecisionRequest.images) → the wire `param` of its image_url
    image_params: Mapping[tuple, str] = field(default_factory=dict)


def bracket_path(path: tuple) -> str | None:
    """("questions", 3, "choices", 1, "value") → "questions[3].choices[1].value"."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or None


def _fail(code: str, path: tuple, message: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid '{bracket_path(path) or 'body'}': {message}", path, code)


_TYPE_NAMES = {str: "a string", bool: "a boolean", list: "an array", dict: "an object", type(None): "null"}


def _kind(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _get(obj: dict, key: str, path: tuple, types: tuple, *, required: bool = True, nullable: bool = False) -> Any:
    """obj[key] checked against `types`; absent (or null when nullable) gives None."""
    where = (*path, key)
    if key not in obj:
        if required:
            raise _fail("missing_required_parameter", where, "required parameter is missing.")
        return None
    value = obj[key]
    if value is None and nullable:
        return None
    if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
        wanted = " or ".join(_TYPE_NAMES[t] for t in types)
        raise _fail("invalid_type", where, f"expected {wanted}, got {_kind(value)}.")
    return value


def _enum(
    obj: dict, key: str, path: tuple, allowed: tuple, *, required: bool = True, nullable: bool = False
) -> str | None:
    value = _get(obj, key, path, (str,), required=required, nullable=nullable)
    if value is not None and value not in allowed:
        raise _fail("invalid_value", (*path, key), f"expected one of {', '.join(map(repr, allowed))}, got {value!r}.")
    return value


_JSON_TYPES = {"string": str, "boolean": bool, "array": list, "object": dict, "null": type(None)}


def _field(obj: dict, schema: dict, key: str, path: tuple, *, max_items: int | None = None) -> Any:
    """obj[key] checked against the rule that `schema` (an object component of the OpenAPI document)
    states for it; `max_items` may lower its maxItems (a server cap). Absent, or null where allowed, gives None."""
    _, rules, types, nullable, required = _compiled(schema, key)
    value = _get(obj, key, path, types, required=required, nullable=nullable)
    if value is None:
        return None
    rule = next(r for r, python_types in rules if isinstance(value, python_types))
    where, n = (*path, key), len(value) if isinstance(value, (str, list)) else 0
    allowed = [v for v in rule.get("enum", [rule["const"]] if "const" in rule else []) if v is not None]
    if allowed and value not in allowed:
        raise _fail("invalid_value", where, f"expected one of {', '.join(map(repr, allowed))}, got {value!r}.")
    if n > rule.get("maxLength", n):
        raise _fail(
            "string_above_max_length",
            where,
            f"string too long. Expected at most {rule['maxLength']} characters, got {n}.",
        )
    if n < rule.get("minItems", 0):
        raise _fail(
            "array_below_min_length", where, f"array too short. Expected at least {rule['minItems']} items, got {n}."
        )
    hi = min(rule.get("maxItems", n), n if max_items is None else max_items)
    if isinstance(value, list) and n > hi:
        raise _fail("array_above_max_length", where, f"array too long. Expected at most {hi} items, got {n}.")
    return value


_COMPILED: dict[tuple[int, str], tuple] = {}


def _compiled(schema: dict, key: str) -> tuple:
    """(schema, [(alternative, its Python types)], the non-null types, nullable, required) of a field,
    worked out once per schema (which the entry keeps alive, so its id stays its own)."""
    hit = _COMPILED.get((id(schema), key))
    if hit is None or hit[0] is not schema:
        rules = [(r, tuple(_JSON_TYPES[t] for t in _types(r))) for r in _alternatives(schema["properties"][key])]
        types = tuple(dict.fromkeys(t for _, ts in rules for t in ts))
        present = tuple(t for t in types if t is not type(None))
        hit = _COMPILED[(id(schema), key)] = (
            schema,
            rules,
            present,
            len(present) < len(types),
            key in schema["required"],
        )
    return hit


def _alternatives(rule: dict) -> list[dict]:
    return [r for member in rule["anyOf"] for r in _alternatives(member)] if "anyOf" in rule else [rule]


def _types(rule: dict) -> list[str]:
    if "type" in rule:
        return [rule["type"]] if isinstance(rule["type"], str) else rule["type"]
    return list(dict.fromkeys("null" if v is None else "string" for v in rule.get("enum", [rule.get("const")])))


def _object(value: Any, path: tuple) -> dict:
    if not isinstance(value, dict):
        raise _fail("invalid_type", path, f"expected an object, got {_kind(value)}.")
    return value


class _Parser:
    """One parse: tracks images (count, paths) and earlier tool calls while walking the body."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.image_paths: dict[int, str] = {}  # id(Image) → param of its image_url
        self.calls: dict[str, set[str]] = {"function_call": set(), "custom_tool_call": set()}

    # -- top level
    def parse(self, body: Any) -> Parsed:
        body = _object(body, ())
        model = _field(body, REQUEST, "model", ())
        input_parts = self.input(body)
        raw_questions = _field(body, REQUEST, "questions", (), max_items=self.limits.max_questions)
        questions = [self.question(q, ("questions", i)) for i, q in enumerate(raw_questions)]
        _field(body, REQUEST, "prompt_cache_key", ())
        _field(body, REQUEST, "safety_identifier", ())
        if (options := _field(body, REQUEST, "prompt_cache_options", ())) is not None:
            _field(options, _CACHE_OPTIONS, "mode", ("prompt_cache_options",))
            _field(options, _CACHE_OPTIONS, "ttl", ("prompt_cache_options",))
        request = _build(lambda: DecisionRequest(input_parts, tuple(q for q, _ in questions)))
        params = {path: self.image_paths[id(img)] for path, img in request.images}
        return Parsed(request, tuple(name for _, name in questions), model, params)

    def input(self, body: dict) -> tuple[Part, ...]:
        items = _field(body, REQUEST, "input", ())
        if isinstance(items, str):
            return (Text(items),)
        return join_blocks([self.item(item, ("input", i)) for i, item in enumerate(items)])

    # -- input items
    def item(self, item: Any, path: tuple) -> list[Part]:
        item = _object(item, path)
        kind = _enum(item, "type", path, ITEM_TYPES, required="role" not in item, nullable="role" in item)
        if kind in (None, "message"):
            return self.message(item, path)
        if kind in self.calls:
            return self.call(item, path, kind)
        return self.call_output(item, path, kind)

    def message(self, item: dict, path: tuple) -> list[Part]:
        role = _enum(item, "role", path, tuple(MESSAGES))
        if role == "assistant":
            _field(item, COMPONENTS["AssistantMessage"], "phase", path)
        parts = _field(item, COMPONENTS[MESSAGES[role]], "content", path)
        if isinstance(parts, str):
            return [Text(PREFIX.get(role, "") + parts)]
        if role == "assistant":
            return self.assistant_parts(parts, (*path, "content"))
        rendered = [
            self.part(p, (*path, "content", j), _part_types(MESSAGES[role], "content")) for j, p in enumerate(parts)
        ]
        return [Text(PREFIX.get(role, "")), *rendered]

    def assistant_parts(self, parts: list, path: tuple) -> list[Part]:
        blocks: list[list[Part]] = []
        last = None
        for j, p in enumerate(parts):
            p = _object(p, (*path, j))
            kind = _enum(p, "type", (*path, j), _part_types("AssistantMessage", "content"))
            if kind == "output_text":
                text = _field(p, COMPONENTS["OutputText"], "text", (*path, j))
                if last == "output_text":
                    blocks[-1].append(Text(text))
                else:
                    blocks.append([Text(PREFIX["assistant"] + text)])
            else:
                blocks.append([Text("Assistant (refusal): " + _field(p, COMPONENTS["Refusal"], "refusal", (*path, j)))])
            last = kind
        return list(join_blocks(blocks))

    def call(self, item: dict, path: tuple, kind: str) -> list[Part]:
        schema = COMPONENTS[ITEMS[kind]]
        call_id = _field(item, schema, "call_id", path)
        name = _field(item, schema, "name", path)
        body = _field(item, schema, "arguments" if kind == "function_call" else "input", path)
        self.optional_ids(item, schema, path)
        self.calls[kind].add(call_id)
        label = "Tool call" if kind == "function_call" else "Custom tool call"
        return [Text(f"{label} {name} [{call_id}]: {body}")]

    def call_output(self, item: dict, path: tuple, kind: str) -> list[Part]:
        call_kind = kind.removesuffix("_output")
        schema = COMPONENTS[ITEMS[kind]]
        call_id = _field(item, schema, "call_id", path)
        if call_id not in self.calls[call_kind]:
            raise _fail("invalid_value", (*path, "call_id"), f"no earlier {call_kind} item has call_id {call_id!r}.")
        raw = _field(item, schema, "output", path)
        if isinstance(raw, str):
            output: list[Part] = [Text(raw)]
        else:
            output = [self.part(p, (*path, "output", j), _part_types(ITEMS[kind], "output")) for j, p in enumerate(raw)]
        self.optional_ids(item, schema, path)
        label = "Tool result" if kind == "function_call_output" else "Custom tool result"
        return [Text(f"{label} [{call_id}]: "), *output]

    def optional_ids(self, item: dict, schema: dict, path: tuple) -> None:
        for key in ("id", "namespace", "status"):
            if key in schema["properties"]:
                _field(item, schema, key, path)

    # -- content parts
    def part(self, part: Any, path: tuple, allowed: tuple, *, breakpoints: bool = True) -> Part:
        part = _object(part, path)
        kind = _enum(part, "type", path, allowed)
        if breakpoints and kind in ("input_text", "input_image"):
            bp = _field(part, COMPONENTS["InputText"], "prompt_cache_breakpoint", path)
            if bp is not None:
                _field(bp, _BREAKPOINT, "mode", (*path, "prompt_cache_breakpoint"))
        if kind == "input_text":
            return Text(_field(part, COMPONENTS["InputText"], "text", path))
        if kind == "input_json":
            return Text(json_text(part, path))
        return self.image(part, path)

    def image(self, part: dict, path: tuple) -> Image:
        url = _field(part, COMPONENTS["InputImage"], "image_url", path)
        _field(part, COMPONENTS["InputImage"], "detail", path)
        if len(self.image_paths) >= MAX_IMAGES:
            raise _fail("array_above_max_length", path, f"too many images. Expected at most {MAX_IMAGES} per request.")
        try:
            img = images.image_from_url(url, self.limits.fetch_image)
        except images.ImageError as e:
            raise _fail(e.code, (*path, "image_url"), e.message) from None
        # Each part decodes to a fresh object that the request keeps alive, so its id keys the path map.
        self.image_paths[id(img)] = bracket_path((*path, "image_url"))
        return img

    # -- questions
    def question(self, raw: Any, path: tuple) -> tuple[Question, str | None]:
        q = _object(raw, path)
        known = kinds.on_wire("openai")
        spec = known[_enum(q, "type", path, tuple(known))]
        name = _field(q, _QUESTION, "name", path)
        instructions, attachments = self.instructions(q, path)
        options = kinds.by_form(FORMS, spec).read(q, path)
        return _build(lambda: Question(spec.name, instructions, options, attachments), path), name

    def instructions(self, q: dict, path: tuple) -> tuple[str, tuple[Part, ...]]:
        raw = _field(q, _QUESTION, "instructions", path)
        if isinstance(raw, str):
            return raw, ()
        allowed = _part_types("Question", "instructions")
        parts = [self.part(p, (*path, "instructions", j), allowed, breakpoints=False) for j, p in enumerate(raw)]
        text = "".join(p.text for p in parts if isinstance(p, Text))
        pictures = [p for p in parts if isinstance(p, Image)]
        attachments = merge_texts(x for k, img in enumerate(pictures, 1) for x in (Text(f"Image reference: {k}"), img))
        return text, attachments


def _listed(form: type[QuestionKind], item: dict, key: str, q: dict, path: tuple) -> tuple[Option, ...]:
    """The options a Choice or Score question lists: objects of schema `item`, each a `key` and a description."""
    field = FORMS[form].field
    seen: set[tuple[type, Any]] = set()
    options = []
    for j, raw in enumerate(_field(q, FORMS[form].question, field, path)):
        where = (*path, field, j)
        raw = _object(raw, where)
        value = _field(raw, item, key, where)
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise _fail(
                "string_above_max_length",
                (*where, key),
                f"string too long. Expected at most {MAX_TEXT} characters.",
            )
        if form.distinct and (type(value), value) in seen:
            raise _fail("invalid_value", (*where, key), f"duplicate choice value {value!r}.")
        seen.add((type(value), value))
        options.append(Option(value, _field(raw, item, "description", where)))
    return tuple(options)


def json_text(part: dict, path: tuple) -> str:
    """An input_json part's data as compact JSON text, within the JSON_MAX_* limits."""
    data = _field(part, COMPONENTS["InputJson"], "data", path)
    where = (*path, "data")
    if isinstance(data, list):
        for k, item in enumerate(data):
            if not isinstance(item, dict):
                raise _fail("invalid_type", (*where, k), f"expected an object, got {_kind(item)}.")
    try:
        check_json_value(data, JSON_MAX_DEPTH, JSON_MAX_VALUES)
    except JSONShapeError as e:
        raise _fail("invalid_value", where, e.message) from None
    text = compact_json(data)
    if len(text.encode("utf-8")) > JSON_MAX_BYTES:
        raise _fail("invalid_value", where, f"JSON is larger than {JSON_MAX_BYTES} bytes of compact UTF-8.")
    return text


def _build(make, path: tuple = ()):
    """Run a request-model constructor; its own checks should never fire after ours, but map them if they do."""
    try:
        return make()
    except InvalidRequest as e:
        raise InvalidRequest(e.message, (*path, *e.path), e.code) from None


def parse(body: Any, *, limits: Limits | None = None) -> Parsed:
    """Validate an OpenAI Decisions body and build the internal request (first error raised)."""
    return _Parser(limits or Limits()).parse(body)


# ---------------------------------------------------------------- rendering


def render(decision: Decision, parsed: Parsed) -> dict:
    """The 200 body: answers in question order, usage as integers."""
    answers = [_answer(a, name, i) for i, (a, name) in enumerate(zip(decision.answers, parsed.names, strict=True))]
    u = decision.usage
    usage = {
        "input_tokens": int(u.input_tokens),
        "input_tokens_details": {
            "cached_tokens": int(u.cached_tokens),
            "cache_write_tokens": int(u.cache_write_tokens),
        },
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(u.input_tokens),
    }
    return {"model": decision.model, "answers": answers, "usage": usage}


def _answer(answer: Answer, name: str | None, index: int) -> dict:
    p = distribution(answer.probabilities, f"questions[{index}]")
    spec = answer.question.spec
    return {"type": spec.wire["openai"], "name": name, **kinds.by_form(FORMS, spec).render(answer, p)}


def _choice_answer(answer: Answer, p: list[float]) -> dict:
    options = answer.question.options
    return {
        "choice": answer.best.value,
        "confidence": answer.confidence,
        "probabilities": [{"value": o.value, "probability": pi} for o, pi in zip(options, p, strict=True)],
    }


def _score_answer(answer: Answer, p: list[float]) -> dict:
    options = answer.question.options
    return {
        "score": answer.score,
        "confidence": answer.confidence,
        "probabilities": [
            {"value": i, "label": o.value, "probability": pi} for i, (o, pi) in enumerate(zip(options, p, strict=True))
        ],
    }


@dataclass(frozen=True)
class Form:
    """How a kind's options and answer look on this protocol; a kind uses its nearest base's.
    `options` and `answer` are the JSON Schemas of the question's and the answer's own members."""

    field: str  # the array of a question that holds its options (what a server cap names)
    read: Callable[[dict, tuple], tuple[Option, ...]]
    render: Callable[[Answer, list[float]], dict]
    options: dict
    answer: dict

    @cached_property
    def question(self) -> dict:
        """The options' members as an object schema (what `_field` reads)."""
        return obj(list(self.options), **self.options)


def _options(field: str, item: dict) -> dict:
    return {field: {"type": "array", "minItems": OPENAI_MIN_OPTIONS, "maxItems": MAX_OPTIONS, "items": item}}


_VALUE = {"type": ["string", "boolean"]}
_CHOICE = obj(["value"], value=_VALUE, description=nullable(text()))
_LEVEL = obj(["label"], label=text(), description=nullable(text()))
_SCORE_ROW = obj(["value", "label", "probability"], value=COUNT, label={"type": "string"}, probability=PROBABILITY)
FORMS: dict[type[QuestionKind], Form] = {
    Predicate: Form(
        "choices",
        lambda q, path: (Option(False, DEFAULT_FALSE), Option(True, DEFAULT_TRUE)),
        lambda answer, p: {"probability": answer.question.spec.probability(p)},
        {},
        {"probability": PROBABILITY},
    ),
    Choice: Form(
        "choices",
        partial(_listed, Choice, _CHOICE, "value"),
        _choice_answer,
        _options("choices", _CHOICE),
        {
            "choice": _VALUE,
            "confidence": PROBABILITY,
            "probabilities": {
                "type": "array",
                "items": obj(["value", "probability"], value=_VALUE, probability=PROBABILITY),
            },
        },
    ),
    Score: Form(
        "levels",
        partial(_listed, Score, _LEVEL, "label"),
        _score_answer,
        _options("levels", _LEVEL),
        {
            "score": {"type": "number", "minimum": 0},
            "confidence": PROBABILITY,
            "probabilities": {"type": "array", "items": _SCORE_ROW},
        },
    ),
}


def check_caps(parsed: Parsed, max_options: int, max_images: int) -> None:
    """The server's own caps (lower than the protocol's): 400 `array_above_max_length` at the field."""
    request = parsed.request
    for i, q in enumerate(request.questions):
        if (n := len(q.options)) > max_options:
            field = kinds.by_form(FORMS, q.spec).field
            raise InvalidRequest(
                f"array too long. This server takes at most {max_options} {field}, got {n}.",
                ("questions", i, field),
                "array_above_max_length",
            )
    if (n := len(request.images)) > max_images:
        raise InvalidRequest(
            f"too many images. This server takes at most {max_images} per request, got {n}.",
            ("input",),
            "array_above_max_length",
        )


_ERROR_TYPES = {"rate_limit": "rate_limit_error", "unavailable": "server_error", "internal": "server_error"}


def error_body(problem: Problem) -> dict:
    kind = _ERROR_TYPES.get(problem.category, "invalid_request_error")
    return {"error": {"message": problem.message, "type": kind, "param": problem.param, "code": problem.code}}


def _problem(exc: BaseException) -> Problem | None:
    if isinstance(exc, UnknownModel):
        return Problem(404, str(exc), "model_not_found", "model")
    return None


# ---------------------------------------------------------------- the schema the parser reads
# Each object's fields are read through `_field` against these components, which are also what
# GET /openapi.json shows: the parser and the document cannot disagree on a field's rule.


def _content(*parts: str) -> dict:
    return {"anyOf": [text(), {"type": "array", "minItems": 1, "items": {"anyOf": [ref(p) for p in parts]}}]}


def _call(kind: str, body: str) -> dict:
    fields = {"call_id": text(), "name": text(), body: text()}
    return obj(["type", *fields], type=const(kind), **fields, **_IDS, namespace=nullable(text()))


def _call_output(kind: str) -> dict:
    call_id = {**text(), "description": f"a {kind.removesuffix('_output')} earlier in input"}
    output = _content("InputText", "InputImage")
    return obj(["type", "call_id", "output"], type=const(kind), call_id=call_id, output=output, **_IDS)


_BREAKPOINT = obj(["mode"], mode=const("explicit"))
_DETAIL = {"enum": ["low", "high", "auto", "original", None]}
_IDS = {"id": nullable(text()), "status": {"enum": ["in_progress", "completed", "incomplete", None]}}
_JSON_DATA = {
    "description": f"≤ {JSON_MAX_DEPTH} levels, ≤ {JSON_MAX_VALUES:,} values, ≤ {JSON_MAX_BYTES // 1024} KiB as compact JSON",
    "anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}],
}
_IMAGE_URL = {"type": "string", "description": "a base64 data: URL (http(s) only when fetching is on)"}
MESSAGES = {
    "user": "UserMessage",
    "developer": "SystemMessage",
    "system": "SystemMessage",
    "assistant": "AssistantMessage",
}
ITEMS = {kind: "".join(w.title() for w in kind.split("_")) for kind in ITEM_TYPES[1:]}
COMPONENTS: dict[str, dict] = {
    "InputText": obj(
        ["type", "text"], type=const("input_text"), text=text(), prompt_cache_breakpoint=nullable(_BREAKPOINT)
    ),
    "InputImage": obj(
        ["type", "image_url"],
        type=const("input_image"),
        image_url=_IMAGE_URL,
        detail=_DETAIL,
        prompt_cache_breakpoint=nullable(_BREAKPOINT),
    ),
    "InputJson": obj(["type", "data"], type=const("input_json"), data=_JSON_DATA),
    # Question instructions take no cache breakpoints.
    "QuestionText": obj(["type", "text"], type=const("input_text"), text=text()),
    "QuestionImage": obj(
        ["type", "image_url"], type=const("input_image"), image_url={"type": "string"}, detail=_DETAIL
    ),
    "OutputText": obj(["type", "text"], type=const("output_text"), text=text()),
    "Refusal": obj(["type", "refusal"], type=const("refusal"), refusal=text()),
    "UserMessage": obj(
        ["role", "content"],
        type=const("message"),
        role=const("user"),
        content=_content("InputText", "InputImage", "InputJson"),
    ),
    "SystemMessage": obj(
        ["role", "content"],
        type=const("message"),
        role={"enum": ["system", "developer"]},
        content=_content("InputText"),
    ),
    "AssistantMessage": obj(
        ["role", "content"],
        type=const("message"),
        role=const("assistant"),
        content=_content("OutputText", "Refusal"),
        phase={"enum": ["commentary", "final_answer", None]},
    ),
    "FunctionCall": _call("function_call", "arguments"),
    "FunctionCallOutput": _call_output("function_call_output"),
    "CustomToolCall": _call("custom_tool_call", "input"),
    "CustomToolCallOutput": _call_output("custom_tool_call_output"),
}
_CACHE_OPTIONS = obj([], mode={"enum": ["implicit", "explicit", None]}, ttl={"enum": ["30m", None]})
_QUESTION = obj(
    ["type", "instructions"],
    instructions=_content("QuestionText", "QuestionImage", "InputJson"),
    name={"type": ["string", "null"]},
)
REQUEST = obj(
    ["model", "input", "questions"],
    model={"type": "string"},
    input=_content(*dict.fromkeys([*MESSAGES.values(), *ITEMS.values()])),
    questions={"type": "array", "minItems": 1, "maxItems": MAX_QUESTIONS, "items": ref("Question")},
    prompt_cache_key=nullable({"type": "string", "maxLength": MAX_ID_LENGTH}),
    prompt_cache_options=nullable(_CACHE_OPTIONS),
    safety_identifier=nullable({"type": "string", "maxLength": MAX_ID_LENGTH}),
)


@cache
def _part_types(component: str, key: str) -> tuple[str, ...]:
    """The part types an array member of a component admits: the `type` consts of its items."""
    schema = _QUESTION if component == "Question" else COMPONENTS[component]
    array = next(r for r in _alternatives(schema["properties"][key]) if r.get("type") == "array")
    names = [r["$ref"].rsplit("/", 1)[1] for r in array["items"]["anyOf"]]
    return tuple(COMPONENTS[n]["properties"]["type"]["const"] for n in names)


def schemas() -> dict[str, dict]:
    """The OpenAPI components: the parser's, plus the question, answer and error shapes (per kind form)."""
    forms = {wire: kinds.by_form(FORMS, spec) for wire, spec in kinds.on_wire("openai").items()}
    name = _QUESTION["properties"]["name"]
    questions = [
        obj([*_QUESTION["required"], *f.options], type=const(w), **_QUESTION["properties"], **f.options)
        for w, f in forms.items()
    ]
    answers = [obj(["type", "name", *f.answer], type=const(w), name=name, **f.answer) for w, f in forms.items()]
    answers.append(obj(["type", "name"], type=const("refusal"), name=name))
    usage = obj(
        ["input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens"],
        input_tokens=COUNT,
        input_tokens_details=obj(
            ["cached_tokens", "cache_write_tokens"], cached_tokens=COUNT, cache_write_tokens=COUNT
        ),
        output_tokens=COUNT,
        output_tokens_details=obj(["reasoning_tokens"], reasoning_tokens=COUNT),
        total_tokens=COUNT,
    )
    listed = {"type": "array", "items": {"anyOf": answers}}
    response = obj(["model", "answers", "usage"], model={"type": "string"}, answers=listed, usage=usage)
    response["additionalProperties"] = False
    error = obj(
        ["message", "type", "param", "code"],
        message={"type": "string"},
        type={"type": "string"},
        param={"type": ["string", "null"]},
        code={"type": ["string", "null"]},
    )
    return {
        **COMPONENTS,
        "Question": {"anyOf": questions},
        "DecisionsRequest": REQUEST,
        "DecisionsResponse": response,
        "OpenAIError": obj(["error"], error=error),
    }


PROTOCOL = Protocol(
    title="OpenAI Decisions",
    path="/v1/decisions",
    operation_id="createDecision",
    summary="OpenAI Decisions: probabilities for typed questions about an input",
    read=lambda raw, content_type: (loads_object(raw), None),
    parse=lambda body, parts, limits: parse(body, limits=limits),
    check_caps=check_caps,
    render=render,
    problem=_problem,
    error_body=error_body,
    schemas=schemas,
    request_content=lambda: json_content("DecisionsRequest"),
    response="DecisionsResponse",
    error="OpenAIError",
    errors={
        "400": "invalid request (code and param say where), context length exceeded, token budget exceeded",
        "401": "missing or wrong API key (auth on)",
        "403": "Host or Origin not allowed",
        "404": "unknown model (strict mode)",
        "415": "unsupported Content-Encoding",
    },
)
decide = PROTOCOL.decide
