"""TypeSafe System One (`POST /v1/systemone`): body dict ⇄ DecisionRequest / Decision.

`parse` reports every validation problem at once (ValidationFailed → 422 `detail[]`, locations
as pydantic writes them: the question id is one element, then the question type); a valid request the
server will not serve (a box question) raises UsageError (400 `api_usage_error`).
Question ids and choice names are keys: they are never scanned for assets nor rendered.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import kinds
from ..answers import Answer, Decision
from ..errors import InvalidRequest
from ..kinds import Choice, Predicate, QuestionKind, Score
from ..limits import MAX_OPTIONS, MAX_PLACEHOLDER_BYTES, MAX_QUESTIONS, SYSTEMONE_MAX_DEPTH, SYSTEMONE_MAX_LEVELS
from ..request import DEFAULT_FALSE, DEFAULT_TRUE, DecisionRequest, Image, Option, Part, Question, Text
from . import images
from .common import (
    FormPart,
    JSONShapeError,
    Limits,
    MalformedBody,
    UnsupportedMediaType,
    check_json_value,
    compact_json,
    distribution,
    is_multipart,
    loads_strict,
    merge_texts,
    parse_multipart,
)
from .protocol import Problem, Protocol, Unauthorized
from .schema import COUNT, PROBABILITY, const, json_content, obj, ref

UNSERVED_TYPES = ("box",)  # valid System One question types this text-scoring server refuses (400)
ASSET_FORMATS = ("png", "jpg", "jpeg")

_TYPE_ERRORS = {str: "string_type", dict: "dict_type", list: "list_type"}
MESSAGES = {
    "missing": "Field required",
    "string_type": "Input should be a valid string",
    "dict_type": "Input should be a valid dictionary",
    "list_type": "Input should be a valid list",
    "model_type": "Input should be a valid dictionary or instance of NoulCriteria",
    "union_tag_not_found": "Unable to extract tag using discriminator 'type'",
}


class ValidationFailed(Exception):
    """Every problem found, as 422 `detail` entries ({loc, msg, type[, ctx]})."""

    def __init__(self, entries: list[dict]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in entries))
        self.entries = entries


class UsageError(Exception):
    """A well-formed request this server cannot serve (400 `api_usage_error`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Parsed:
    request: DecisionRequest
    ids: tuple[str, ...]
    # per question: the score levels exactly as sent (echoed as the legend), else None
    legends: tuple[tuple | None, ...]
    model: str


def entry(loc: Sequence, type: str, msg: str | None = None, ctx: dict | None = None) -> dict:
    e = {"loc": ["body", *loc], "msg": msg or MESSAGES.get(type, type), "type": type}
    if ctx:
        e["ctx"] = ctx
    return e


def split_form(parts: list[FormPart]) -> tuple[Any, dict[str, bytes]]:
    """A multipart body → (the `request` part's JSON, {part name: bytes} of the other parts)."""
    requests = [p for p in parts if p.name == "request"]
    if len(requests) != 1:
        what = "no part named 'request'" if not requests else "several parts named 'request'"
        raise ValidationFailed(
            [entry(["request"], "missing" if not requests else "value_error", f"the multipart body has {what}")]
        )
    others: dict[str, bytes] = {}
    for p in parts:
        if p.name == "request":
            continue
        if p.name in others:
            raise ValidationFailed(
                [entry(["assets"], "value_error", f"the multipart body has two parts named {p.name!r}")]
            )
        others[p.name] = p.data
    return loads_strict(requests[0].data), others


# ---------------------------------------------------------------- validation


class _Validator:
    """Collects every problem; valid values are left for the builder."""

    def __init__(self, parts: Mapping[str, bytes] | None, limits: Limits) -> None:
        self.parts = parts
        self.limits = limits
        self.errors: list[dict] = []
        self.assets: dict[str, Image] = {}

    def error(self, loc: Sequence, type: str, msg: str | None = None, ctx: dict | None = None) -> None:
        self.errors.append(entry(loc, type, msg, ctx))

    def invalid(self, loc: Sequence, message: str) -> None:
        self.error(loc, "value_error", f"Value error, {message}")

    def text(self, value: Any, loc: Sequence, *, nullable: bool = True) -> bool:
        """A "text": string, object or array (depth ≤ 64, finite numbers); None only when nullable."""
        if value is None and nullable or isinstance(value, str):
            return True
        if isinstance(value, (dict, list)):
            try:
                check_json_value(value, SYSTEMONE_MAX_DEPTH)
                return True
            except JSONShapeError as e:
                self.invalid([*loc, *e.path], e.message)
                return False
        self.error(loc, "string_type")
        return False

    def body(self, body: Any) -> None:
        if not isinstance(body, dict):
            raise ValidationFailed([entry([], "dict_type")])
        self.field(body, "model", ["model"], str)
        if "state" not in body:
            self.error(["state"], "missing")
        else:
            self.text(body["state"], ["state"], nullable=False)
        self.questions(body)
        self.asset_map(body.get("assets"))

    def field(self, obj: dict, key: str, loc: list, kind: type) -> bool:
        """Records a missing `key` or a value that is not a `kind`; True when obj[key] is one."""
        if key not in obj:
            self.error(loc, "missing")
        elif not isinstance(obj[key], kind):
            self.error(loc, _TYPE_ERRORS[kind])
        return isinstance(obj.get(key), kind)

    def questions(self, body: dict) -> None:
        if not self.field(body, "questions", ["questions"], dict):
            return
        qs = body["questions"]
        if self.count(len(qs), 1, self.limits.max_questions, ["questions"], "Dictionary"):
            for qid, q in qs.items():
                self.question(qid, q)

    def question(self, qid: str, q: Any) -> None:
        at = ["questions", qid]
        if not isinstance(q, dict):
            return self.error(at, "dict_type")
        kind = q.get("type")
        if kind is None:
            return self.error(at, "union_tag_not_found")
        known = kinds.on_wire("systemone")
        if kind not in (*known, *UNSERVED_TYPES):
            tags = ", ".join(f"'{t}'" for t in (*known, *UNSERVED_TYPES))
            return self.error(
                at,
                "union_tag_invalid",
                f"Input tag {kind!r} found using 'type' does not match any of the expected tags: {tags}",
            )
        at = [*at, kind]
        if "instructions" in q:
            self.text(q["instructions"], [*at, "instructions"])
        if kind in known:
            kinds.by_form(FORMS, known[kind]).validate(self, q, [*at, "criteria"])

    def noul_criteria(self, q: dict, loc: list) -> None:
        criteria = q.get("criteria")
        if criteria is None:
            return
        if not isinstance(criteria, dict):
            return self.error(loc, "model_type")
        for side in ("true", "false"):
            if side in criteria:
                self.text(criteria[side], [*loc, side])

    def criteria(self, q: dict, loc: list) -> None:
        """Criteria as the kind form's schema states them: an object of named texts or a list of texts."""
        schema = kinds.by_form(FORMS, kinds.on_wire("systemone")[q["type"]]).criteria
        if schema["type"] == "object":
            kind, what, lo, hi, item = dict, "Dictionary", "minProperties", "maxProperties", "additionalProperties"
        else:
            kind, what, lo, hi, item = list, "List", "minItems", "maxItems", "items"
        if not self.field(q, "criteria", loc, kind):
            return
        criteria = q["criteria"]
        if self.count(len(criteria), schema[lo], schema[hi], loc, what):
            nullable = "null" in schema[item]["type"]
            for key, value in criteria.items() if kind is dict else enumerate(criteria):
                self.text(value, [*loc, key], nullable=nullable)

    def references(self, body: dict) -> None:
        """Every asset is referenced in the (valid) body's state or questions."""
        scanner = _Placeholders(self.assets)
        found = set(scanner.find(body["state"], []))
        for q in body["questions"].values():
            found.update(scanner.find(_question_values(q), []))
        for k in self.assets:
            if k not in found:
                self.invalid(["assets"], f"asset {k!r} is not referenced in state, instructions or criteria")

    def count(self, n: int, lo: int, hi: float, loc: list, what: str) -> bool:
        if n < lo:
            self.error(
                loc, "too_short", f"{what} should have at least {lo} item after validation, not {n}", {"min_length": lo}
            )
        elif n > hi:
            self.error(
                loc, "too_long", f"{what} should have at most {hi} items after validation, not {n}", {"max_length": hi}
            )
        return lo <= n <= hi

    # -- assets
    def asset_map(self, assets: Any) -> None:
        if assets is None:
            if self.parts:
                self.invalid(["assets"], "the multipart body has image parts but no assets claim them")
            return
        if not isinstance(assets, dict):
            return self.error(["assets"], "dict_type")
        if not self.count(len(assets), 1, math.inf, ["assets"], "Dictionary"):
            return
        claimed: dict[str, str] = {}
        for key, value in assets.items():
            self.asset(key, value, claimed)
        unclaimed = [name for name in (self.parts or {}) if name not in claimed]
        if unclaimed:
            self.invalid(["assets"], f"multipart part {unclaimed[0]!r} is not claimed by any asset")

    def asset(self, key: str, value: Any, claimed: dict[str, str]) -> None:
        loc = ["assets", key]
        if not key.strip() or len(key.encode("utf-8")) > MAX_PLACEHOLDER_BYTES:
            return self.invalid(loc, f"an asset key must be non-blank and at most {MAX_PLACEHOLDER_BYTES} bytes")
        if not isinstance(value, dict):
            return self.error(loc, "dict_type")
        if value.get("type") not in (None, "image"):
            return self.invalid([*loc, "type"], "the only asset type is 'image'")
        if value.get("format") is not None and value["format"] not in ASSET_FORMATS:
            return self.invalid([*loc, "format"], "format should be 'png', 'jpg' or 'jpeg'")
        data = self.part_bytes(value, loc, claimed) if value.get("part") is not None else self.base64_bytes(value, loc)
        if data is None:
            return
        try:
            self.assets[key] = images.image_from_bytes(data)
        except images.ImageError as e:
            where = "part" if value.get("part") is not None else "data_base64"
            self.invalid([*loc, where], e.message)

    def part_bytes(self, value: dict, loc: list, claimed: dict[str, str]) -> bytes | None:
        name = value["part"]
        if not isinstance(name, str):
            return self.error([*loc, "part"], "string_type")
        if self.parts is None or name not in self.parts:
            return self.invalid([*loc, "part"], f"there is no multipart part named {name!r}")
        if name in claimed:
            return self.invalid([*loc, "part"], f"part {name!r} is already claimed by asset {claimed[name]!r}")
        claimed[name] = loc[-1]
        return self.parts[name]

    def base64_bytes(self, value: dict, loc: list) -> bytes | None:
        ok = True
        for field in ("data_base64", "format"):
            if value.get(field) is None:
                self.error([*loc, field], "missing", f"Field required (an asset without 'part' needs {field})")
                ok = False
            elif not isinstance(value[field], str):
                self.error([*loc, field], "string_type")
                ok = False
        if not ok:
            return None
        try:
            return images.decode_base64(value["data_base64"])
        except images.ImageError as e:
            return self.invalid([*loc, "data_base64"], e.message)


# ---------------------------------------------------------------- placeholders


class _Placeholders:
    """Finds asset placeholders in string values: earliest match first, longest among equals."""

    def __init__(self, assets: Mapping[str, Image]) -> None:
        keys = sorted(assets, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, keys))) if keys else None

    def find(self, value: Any, found: list[str]) -> list[str]:
        """Append every placeholder occurrence in the string values of `value` (not keys), in order."""
        if self.pattern is None:
            return found
        if isinstance(value, str):
            found.extend(m.group(0) for m in self.pattern.finditer(value))
        elif isinstance(value, (dict, list)):
            for v in value.values() if isinstance(value, dict) else value:
                self.find(v, found)
        return found


def _question_values(q: dict) -> list:
    """The scanned values of a valid question: instructions, then criteria values (never keys)."""
    criteria = q.get("criteria")
    spec = kinds.on_wire("systemone").get(q.get("type"))
    if isinstance(criteria, dict) and isinstance(spec, Predicate):
        values = [criteria[side] for side in ("true", "false") if side in criteria]
    elif isinstance(criteria, dict):
        values = list(criteria.values())
    else:
        values = criteria if isinstance(criteria, list) else []
    return [q.get("instructions"), *values]


# ---------------------------------------------------------------- building


def as_text(value: Any) -> str:
    """A "text" as the model sees it: strings as they are, objects and arrays as compact JSON."""
    return value if isinstance(value, str) else compact_json(value)


def _side(criteria: dict, side: str, default: str) -> str | None:
    """A noul side: absent keeps the default description, null removes it, text replaces it."""
    if side not in criteria:
        return default
    return None if criteria[side] is None else as_text(criteria[side])


def _question(q: dict, assets: Mapping[str, Image], scanner: _Placeholders) -> tuple[Question, tuple | None]:
    spec = kinds.on_wire("systemone")[q["type"]]
    instructions = "" if q.get("instructions") is None else as_text(q["instructions"])
    found = dict.fromkeys(scanner.find(_question_values(q), []))
    attachments = tuple(x for ph in found for x in (Text(f"Image reference: {ph}"), assets[ph]))
    options, legend = kinds.by_form(FORMS, spec).build(q)
    return Question(spec.name, instructions, options, attachments), legend


def _sides(q: dict) -> tuple[tuple[Option, ...], None]:
    criteria = q.get("criteria") or {}
    true, false = _side(criteria, "true", DEFAULT_TRUE), _side(criteria, "false", DEFAULT_FALSE)
    return (Option(False, false), Option(True, true)), None


def _named(q: dict) -> tuple[tuple[Option, ...], None]:
    return tuple(Option(name, None if d is None else as_text(d)) for name, d in q["criteria"].items()), None


def _levels(q: dict) -> tuple[tuple[Option, ...], tuple]:
    """Levels as labels (an empty one is named by its index); the levels as sent are the legend."""
    levels = q["criteria"]
    return tuple(Option(as_text(level) if level != "" else str(i)) for i, level in enumerate(levels)), tuple(levels)


def _input(state: Any, assets: Mapping[str, Image], scanner: _Placeholders) -> tuple[Part, ...]:
    """The state text, then each image it references after its reference text, blocks a blank line apart."""
    parts: list[Part] = [Text(as_text(state))]
    for ph in dict.fromkeys(scanner.find(state, [])):
        parts += [Text(f"\n\nImage reference: {ph}"), assets[ph]]
    return merge_texts(parts)


def parse(body: Any, *, parts: Mapping[str, bytes] | None = None, limits: Limits | None = None) -> Parsed:
    """Validate a System One body (`parts`: the multipart image parts, if any) and build the request."""
    v = _Validator(parts, limits or Limits())
    v.body(body)
    if not v.errors and v.assets:
        v.references(body)
    if v.errors:
        raise ValidationFailed(v.errors)
    unserved = [(qid, q["type"]) for qid, q in body["questions"].items() if q["type"] in UNSERVED_TYPES]
    if unserved:
        qid, kind = unserved[0]
        raise UsageError(f"{kind} questions are not supported by this text-scoring server (question {qid!r})")
    scanner = _Placeholders(v.assets)
    built = [_question(q, v.assets, scanner) for q in body["questions"].values()]
    try:
        request = DecisionRequest(_input(body["state"], v.assets, scanner), tuple(q for q, _ in built))
    except InvalidRequest as e:  # the request model's own checks; ours should have caught everything
        raise ValidationFailed([entry(list(e.path), "value_error", f"Value error, {e.message}")]) from None
    return Parsed(request, tuple(body["questions"]), tuple(legend for _, legend in built), body["model"])


# ---------------------------------------------------------------- rendering


def render(decision: Decision, parsed: Parsed) -> dict:
    """The 200 body: answers keyed by question id in request order, score levels echoed as the legend."""
    answers = {}
    for qid, answer, legend in zip(parsed.ids, decision.answers, parsed.legends, strict=True):
        answers[qid] = _answer(answer, legend, qid)
    usage = {"input_tokens": int(decision.usage.input_tokens), "output_tokens": 0}
    return {"model": decision.model, "answers": answers, "usage": usage}


def _answer(answer: Answer, legend: tuple | None, qid: str) -> dict:
    p = distribution(answer.probabilities, f"question {qid!r}")
    spec = answer.question.spec
    return {"type": spec.wire["systemone"], **kinds.by_form(FORMS, spec).render(answer, p, legend)}


def _noul_answer(answer: Answer, p: list[float], legend: tuple | None) -> dict:
    return {"noul": answer.question.spec.probability(p)}


def _choice_answer(answer: Answer, p: list[float], legend: tuple | None) -> dict:
    return {
        "choice": answer.best.value,
        "confidence": answer.confidence,
        "probabilities": {o.value: pi for o, pi in zip(answer.question.options, p, strict=True)},
    }


def _score_answer(answer: Answer, p: list[float], legend: tuple | None) -> dict:
    return {
        "score": answer.score,
        "confidence": answer.confidence,
        "legend": {str(i): level for i, level in enumerate(legend or ())},
        "probabilities": {str(i): pi for i, pi in enumerate(p)},
    }


@dataclass(frozen=True)
class Form:
    """How a kind's criteria and answer look on this protocol; a kind uses its nearest base's.
    `criteria` and `answer` are JSON Schemas: of the criteria, and of the answer's own members."""

    validate: Callable[[_Validator, dict, list], None]  # records the criteria's problems at loc
    build: Callable[[dict], tuple[tuple[Option, ...], tuple | None]]  # valid criteria → options, legend
    render: Callable[[Answer, list[float], tuple | None], dict]
    criteria: dict
    answer: dict
    criteria_required: bool = True


_TEXT = {"type": ["string", "object", "array"], "description": "text; objects and arrays are shown as compact JSON"}
_OPTIONAL_TEXT = {"type": ["string", "object", "array", "null"]}
_DISTRIBUTION = {"type": "object", "additionalProperties": PROBABILITY}
_SIDES = {"type": ["object", "null"], "properties": {"true": _OPTIONAL_TEXT, "false": _OPTIONAL_TEXT}}
_NAMED = {"type": "object", "minProperties": 1, "maxProperties": MAX_OPTIONS, "additionalProperties": _OPTIONAL_TEXT}
_LEVELS = {"type": "array", "minItems": 1, "maxItems": SYSTEMONE_MAX_LEVELS, "items": _TEXT}
FORMS: dict[type[QuestionKind], Form] = {
    Predicate: Form(_Validator.noul_criteria, _sides, _noul_answer, _SIDES, {"noul": PROBABILITY}, False),
    Choice: Form(
        _Validator.criteria,
        _named,
        _choice_answer,
        _NAMED,
        {"choice": {"type": "string"}, "confidence": PROBABILITY, "probabilities": _DISTRIBUTION},
    ),
    Score: Form(
        _Validator.criteria,
        _levels,
        _score_answer,
        _LEVELS,
        {
            "score": {"type": "number", "minimum": 0},
            "confidence": PROBABILITY,
            "legend": {"type": "object", "additionalProperties": _TEXT},
            "probabilities": _DISTRIBUTION,
        },
    ),
}


def read(raw: bytes, content_type: str) -> tuple[Any, dict[str, bytes] | None]:
    """A JSON body, or a multipart one: its `request` part's JSON and its image parts."""
    if is_multipart(content_type):
        return split_form(parse_multipart(raw, content_type))
    if content_type.strip().lower().startswith("multipart/"):
        raise UnsupportedMediaType(
            f"unsupported Content-Type {content_type!r}; send application/json or multipart/form-data"
        )
    return loads_strict(raw), None


def check_caps(parsed: Parsed, max_options: int, max_images: int) -> None:
    """The server's own caps (lower than the protocol's): 422 `too_long` at the criteria or the assets."""
    request = parsed.request
    for qid, q in zip(parsed.ids, request.questions, strict=True):
        if (n := len(q.options)) > max_options:
            loc = ["questions", qid, q.spec.wire["systemone"], "criteria"]
            msg = f"this server takes at most {max_options} options per question, not {n}"
            raise ValidationFailed([entry(loc, "too_long", msg, {"max_length": max_options})])
    if (n := len(request.images)) > max_images:
        msg = f"this server takes at most {max_images} images per request, not {n}"
        raise ValidationFailed([entry(["assets"], "too_long", msg, {"max_length": max_images})])


_ERROR_TYPES = {
    "auth": "authentication_error",
    "forbidden": "permission_denied",
    "rate_limit": "rate_limit_error",
    "unavailable": "overloaded_error",
    "internal": "internal_error",
    "too_large": "request_too_large",
    "media_type": "unsupported_media_type",
    "headers": "request_header_fields_too_large",
    "not_found": "not_found",
    "method": "method_not_allowed",
}


def error_body(problem: Problem) -> dict:
    if isinstance(problem.cause, ValidationFailed):
        return {"detail": problem.cause.entries}
    return {"detail": {"error_type": _ERROR_TYPES.get(problem.category, "api_usage_error"), "message": problem.message}}


def _problem(exc: BaseException) -> Problem | None:
    """System One's own statuses: validation is a 422 with every entry, a missing key a 403."""
    if isinstance(exc, MalformedBody):
        exc = ValidationFailed([_malformed_entry(exc)])
        return Problem(422, str(exc), cause=exc)
    if isinstance(exc, ValidationFailed):
        return Problem(422, str(exc), "invalid_value", cause=exc)
    if isinstance(exc, UsageError):
        return Problem(400, exc.message)
    if isinstance(exc, Unauthorized) and exc.missing:
        return Problem(403, "send the API key as 'Authorization: Bearer <key>'", category="auth")
    return None


def _malformed_entry(exc: MalformedBody) -> dict:
    if exc.not_object:
        return entry([], "dict_type")
    if exc.loc:
        return entry(list(exc.loc[1:]), "value_error", f"Value error, {exc.message}")
    return entry([exc.offset or 0], "json_invalid", f"JSON decode error: {exc.message}")


# ---------------------------------------------------------------- OpenAPI


def schemas() -> dict[str, dict]:
    """The OpenAPI components of this protocol, from the limits and kind forms the validator uses."""
    forms = {wire: kinds.by_form(FORMS, spec) for wire, spec in kinds.on_wire("systemone").items()}
    questions = [
        obj(
            ["type", "criteria"] if f.criteria_required else ["type"],
            type=const(w),
            instructions=_OPTIONAL_TEXT,
            criteria=f.criteria,
        )
        for w, f in forms.items()
    ]
    answers = [obj(["type", *f.answer], type=const(w), **f.answer) for w, f in forms.items()]
    asset = obj(
        [],
        type=const("image"),
        format={"enum": list(ASSET_FORMATS)},
        data_base64={"type": "string"},
        part={"type": "string", "description": "a multipart part's name"},
    )
    request = obj(
        ["model", "state", "questions"],
        model={"type": "string", "examples": ["jev-latest"]},
        state=_TEXT,
        questions={
            "type": "object",
            "minProperties": 1,
            "maxProperties": MAX_QUESTIONS,
            "additionalProperties": {"anyOf": questions},
        },
        assets={
            "type": ["object", "null"],
            "minProperties": 1,
            "description": "placeholder → image; every asset must be referenced in the state or a question",
            "additionalProperties": asset,
        },
    )
    response = obj(
        ["model", "answers", "usage"],
        model={"type": "string"},
        answers={"type": "object", "additionalProperties": {"anyOf": answers}},
        usage=obj(["input_tokens", "output_tokens"], input_tokens=COUNT, output_tokens=COUNT),
    )
    response["patternProperties"] = {"^x_": {}}
    response["additionalProperties"] = False
    detail = obj(["error_type", "message"], error_type={"type": "string"}, message={"type": "string"})
    entry = obj(
        ["loc", "msg", "type"],
        loc={"type": "array", "minItems": 1, "items": {"type": ["string", "integer"]}},
        msg={"type": "string"},
        type={"type": "string"},
    )
    return {
        "SystemOneRequest": request,
        "SystemOneResponse": response,
        "SystemOneError": obj(["detail"], detail=detail),
        "SystemOneValidationError": obj(["detail"], detail={"type": "array", "minItems": 1, "items": entry}),
    }


def request_content() -> dict:
    """A JSON body, or multipart: the body as the `request` part, images as other parts."""
    multipart = {
        "type": "object",
        "required": ["request"],
        "properties": {"request": ref("SystemOneRequest")},
        "additionalProperties": {"type": "string", "format": "binary"},
    }
    return {
        **json_content("SystemOneRequest"),
        "multipart/form-data": {"schema": multipart, "encoding": {"request": {"contentType": "application/json"}}},
    }


PROTOCOL = Protocol(
    title="TypeSafe System One",
    path="/v1/systemone",
    operation_id="systemOne",
    summary="TypeSafe System One: noul, choice and score questions about a state",
    read=read,
    parse=lambda body, parts, limits: parse(body, parts=parts, limits=limits),
    check_caps=check_caps,
    render=render,
    problem=_problem,
    error_body=error_body,
    schemas=schemas,
    request_content=request_content,
    response="SystemOneResponse",
    error="SystemOneError",
    validation_error="SystemOneValidationError",
    errors={
        "400": "unsupported question (box), images on a text-only model, context length or token budget exceeded",
        "401": "wrong API key (auth on)",
        "403": "missing API key (auth on); Host or Origin not allowed",
        "415": "unsupported Content-Encoding or Content-Type",
        "422": "validation failed (every error found, with its location)",
    },
)
decide = PROTOCOL.decide
