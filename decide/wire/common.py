"""What both protocols share: body decoding, strict JSON, multipart, compact JSON text, part lists.

No Flask and no sockets here: every function takes bytes or plain values, so it is testable alone.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import zstandard
from werkzeug.http import parse_options_header
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from ..limits import MAX_BODY_BYTES, MAX_QUESTIONS
from ..request import Part, Text

_READ_CHUNK = 1 << 20


# ---------------------------------------------------------------- transport errors


class WireError(Exception):
    """A problem with the HTTP body itself, before either protocol looks at it.

    `code` is a stable reason for programs, `category` what kind of failure (see protocol.Problem).
    """

    status = 400
    code: str | None = None
    category = "invalid"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BodyTooLarge(WireError):
    status = 413
    code = "request_too_large"
    category = "too_large"


class UnsupportedEncoding(WireError):
    status = 415
    code = "unsupported_content_encoding"
    category = "media_type"


class UnsupportedMediaType(WireError):
    status = 415
    code = "unsupported_media_type"
    category = "media_type"


class MalformedBody(WireError):
    """Not JSON, or not a JSON object (OpenAI: 400 with null code; System One: 422).

    `offset` is the character offset of a JSON syntax error; None when the body parsed
    but is not an object (`not_object`), or for a broken multipart body (`loc` names it).
    """

    def __init__(self, message: str, offset: int | None = None, *, not_object: bool = False, loc: tuple = ()) -> None:
        super().__init__(message)
        self.offset = offset
        self.not_object = not_object
        self.loc = loc


@dataclass(frozen=True)
class Limits:
    """Request limits and the optional remote image fetcher handed to the parsers.

    `fetch_image` is None when fetching remote image URLs is off (the default): such URLs
    are then rejected. With it, parsing may do network I/O; tests leave it None.
    """

    max_questions: int = MAX_QUESTIONS
    fetch_image: Callable[[str], bytes] | None = None


# ---------------------------------------------------------------- body decoding


def decode_body(raw: bytes, content_encoding: str | None, cap: int = MAX_BODY_BYTES) -> bytes:
    """Undo `Content-Encoding` (identity or zstd, in any stacking), refusing to grow past `cap`."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    unknown = [c for c in codings if c not in ("identity", "zstd")]
    if unknown:
        raise UnsupportedEncoding(f"unsupported Content-Encoding {unknown[0]!r}; send identity or zstd")
    if len(raw) > cap:
        raise BodyTooLarge(f"request body is larger than {cap} bytes")
    for coding in reversed(codings):
        if coding == "zstd":
            raw = zstd_decompress(raw, cap)
    return raw


def zstd_decompress(data: bytes, cap: int) -> bytes:
    """Decompress every zstd frame in `data`; more than `cap` bytes of output is a 413."""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    out = bytearray()
    try:
        while chunk := reader.read(_READ_CHUNK):
            out += chunk
            if len(out) > cap:
                raise BodyTooLarge(f"request body decompresses to more than {cap} bytes")
    except zstandard.ZstdError as e:
        raise MalformedBody(f"the zstd body cannot be decompressed: {e}") from None
    return bytes(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(data: bytes | str) -> Any:
    """Parse UTF-8 JSON; NaN/Infinity literals and invalid UTF-8 are malformed. Duplicate keys: last wins."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError as e:
        raise MalformedBody(f"the body is not valid UTF-8 (byte {e.start})", e.start) from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise MalformedBody(f"the body is not valid JSON: {e.msg} (char {e.pos})", e.pos) from None
    except ValueError as e:  # parse_constant
        hits = [i for i in (text.find("NaN"), text.find("Infinity")) if i >= 0]
        raise MalformedBody(f"the body is not valid JSON: {e}", min(hits, default=0)) from None
    except RecursionError:
        raise MalformedBody("the body is not valid JSON: nested too deeply", 0) from None


def loads_object(data: bytes | str) -> dict:
    value = loads_strict(data)
    if not isinstance(value, dict):
        raise MalformedBody("the body must be a JSON object", not_object=True)
    return value


# ---------------------------------------------------------------- multipart


@dataclass(frozen=True)
class FormPart:
    name: str
    content_type: str
    data: bytes


def is_multipart(content_type: str | None) -> bool:
    return parse_options_header(content_type or "")[0].lower() == "multipart/form-data"


def parse_multipart(body: bytes, content_type: str) -> list[FormPart]:
    """Split a multipart/form-data body into its parts, in order."""
    mimetype, options = parse_options_header(content_type)
    boundary = options.get("boundary", "")
    if mimetype.lower() != "multipart/form-data" or not boundary:
        raise MalformedBody("a multipart body needs Content-Type multipart/form-data with a boundary", loc=("body",))
    decoder = MultipartDecoder(boundary.encode("latin-1"))
    decoder.receive_data(body)
    decoder.receive_data(None)
    parts: list[FormPart] = []
    current: list = []
    while True:
        try:
            event = decoder.next_event()
        except ValueError as e:
            raise MalformedBody(f"the multipart body is malformed: {e}", loc=("body",)) from None
        if isinstance(event, (Field, File)):
            current = [event.name, event.headers.get("content-type", ""), bytearray()]
        elif isinstance(event, Data):
            if not current:
                raise MalformedBody("the multipart body is malformed: data outside a part", loc=("body",))
            current[2] += event.data
            if not event.more_data:
                parts.append(FormPart(current[0], current[1], bytes(current[2])))
                current = []
        elif isinstance(event, (Epilogue, NeedData)):
            break
    if isinstance(event, NeedData):
        raise MalformedBody("the multipart body ends before its closing boundary", loc=("body",))
    return parts


# ---------------------------------------------------------------- compact JSON text


def js_number(x: int | float) -> str:
    """A number as JavaScript's JSON.stringify writes it (1.0 → "1", 1e-7 → "1e-7")."""
    if isinstance(x, int):
        return str(x)
    if x == int(x) and abs(x) < 1e21:
        return str(int(x))
    sign = "-" if x < 0 else ""
    digits_tuple, exp = Decimal(repr(abs(x))).normalize().as_tuple()[1:]
    digits = "".join(map(str, digits_tuple))
    k, n = len(digits), len(digits) + exp  # value = 0.digits × 10^n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def compact_json(value: Any) -> str:
    """Compact JSON text as JSON.stringify would write it (no spaces, raw non-ASCII)."""
    out: list[str] = []
    _write_json(value, out)
    return "".join(out)


def _write_json(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_encode_string(value))
    elif value is None or isinstance(value, bool):
        out.append("null" if value is None else ("true" if value else "false"))
    elif isinstance(value, (int, float)):
        out.append(js_number(value))
    elif isinstance(value, dict):
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            out.append("," if i else "")
            out.append(_encode_string(str(k)) + ":")
            _write_json(v, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, v in enumerate(value):
            out.append("," if i else "")
            _write_json(v, out)
        out.append("]")
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


class JSONShapeError(ValueError):
    """A JSON value breaks a structural limit; `path` is relative to the value checked."""

    def __init__(self, message: str, path: tuple = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def check_json_value(value: Any, max_depth: int, max_values: int | None = None) -> int:
    """Count the values (every node) of `value`; raise JSONShapeError on depth, count or a non-finite number."""
    count = _walk(value, (), 0, max_depth)
    if max_values is not None and count > max_values:
        raise JSONShapeError(f"JSON has {count} values; at most {max_values} are allowed")
    return count


def _walk(value: Any, path: tuple, depth: int, max_depth: int) -> int:
    if isinstance(value, float) and not math.isfinite(value):
        raise JSONShapeError("numbers must be finite", path)
    if not isinstance(value, (dict, list)):
        return 1
    if depth + 1 > max_depth:
        raise JSONShapeError(f"JSON nests more than {max_depth} levels deep", path)
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return 1 + sum(_walk(v, (*path, k), depth + 1, max_depth) for k, v in items)


# ---------------------------------------------------------------- part lists


def join_blocks(blocks: Iterable[Sequence[Part]], separator: str = "\n\n") -> tuple[Part, ...]:
    """Blocks of parts separated by `separator`, adjacent texts merged into one Text."""
    parts: list[Part] = []
    for i, block in enumerate(blocks):
        if i:
            parts.append(Text(separator))
        parts.extend(block)
    return merge_texts(parts)


def merge_texts(parts: Iterable[Part]) -> tuple[Part, ...]:
    """Adjacent texts joined, empty texts dropped, images kept in place."""
    out: list[Part] = []
    for p in parts:
        if isinstance(p, Text) and not p.text:
            continue
        if isinstance(p, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].text + p.text)
        else:
            out.append(p)
    return tuple(out)


def distribution(probabilities: Sequence[float], where: str) -> list[float]:
    """The scorer's output as floats; anything but a distribution is a server bug (500)."""
    p = [float(x) for x in probabilities]
    if not all(0.0 <= x <= 1.0 for x in p) or abs(sum(p) - 1.0) > 1e-5:
        raise ValueError(f"the scorer returned an invalid distribution for {where}: {p}")
    return p


# ---------------------------------------------------------------- GET /v1/models


OPENAI_ALIAS = "gpt-6-luna"
SYSTEMONE_ALIAS = "jev-latest"


def models_body(served: str, aliases: Sequence[str], created: int, release_date: str) -> dict:
    """One body for both SDKs (each reads its own key): OpenAI's `data[]` and TypeSafe's `models[]`, served id first."""
    names = list(dict.fromkeys([served, OPENAI_ALIAS, SYSTEMONE_ALIAS, *aliases]))
    data = [{"id": n, "object": "model", "created": created, "owned_by": "local"} for n in names]
    models = [
        {"name": served, "description": "Served locally; answers every decision request.", "release_date": release_date}
    ]
    models += [
        {"name": n, "description": f"Alias of {served}.", "release_date": release_date}
        for n in names[1:]
        if n != OPENAI_ALIAS
    ]
    return {"object": "list", "data": data, "models": models}
