"""Labelled JSONL: one example a line, `{"state": ..., "questions": {id: <System One question>}, "labels": {id: value}}`.

A label is `true`/`false` for a noul question, an option key for a choice, a level index (or the
level's text) for a score. A question without a label is asked but not scored. Every mistake is a
`DataError` naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import DecideError
from ..request import DecisionRequest, Question
from ..wire import systemone


class DataError(DecideError):
    """A labelled file that cannot be read; the message names the line."""


@dataclass(frozen=True)
class Example:
    line: int
    request: DecisionRequest
    ids: tuple[str, ...]
    labels: tuple[int | None, ...]  # per question: the index of the right option, None when unlabelled


def load(path: str | Path) -> list[Example]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    examples = list(_examples(path, text))
    if not examples:
        raise DataError(f"{path}: no examples (expected one JSON object a line)")
    return examples


def _examples(path: Path, text: str) -> Iterator[Example]:
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield parse_line(line, n)
            except DataError as e:
                raise DataError(f"{path}:{n}: {e}") from None


def parse_line(line: str, n: int = 0) -> Example:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict) or not isinstance(record.get("questions"), dict):
        raise DataError('expected an object with "state", "questions" and "labels"')
    labels = record.get("labels", {})
    if not isinstance(labels, dict):
        raise DataError('"labels" must be an object {question id: value}')
    unknown = sorted(set(labels) - set(record["questions"]))
    if unknown:
        raise DataError(f"label for unknown question {unknown[0]!r}")
    body = {"model": "jev-latest", "state": record.get("state", ""), "questions": record["questions"]}
    try:
        parsed = systemone.parse(body)
    except systemone.ValidationFailed as e:
        first = e.entries[0]
        raise DataError(f"{'.'.join(str(x) for x in first['loc'][1:])}: {first['msg']}") from None
    except systemone.UsageError as e:
        raise DataError(e.message) from None
    indices = tuple(
        label_index(q, labels[qid], qid) if qid in labels else None
        for qid, q in zip(parsed.ids, parsed.request.questions)
    )
    return Example(n, parsed.request, parsed.ids, indices)


def label_index(q: Question, value, qid: str) -> int:
    """The index of the option `value` names in `q`."""
    if q.kind == "predicate":
        if not isinstance(value, bool):
            raise DataError(f"question {qid!r} is yes/no: its label must be true or false, got {value!r}")
        return int(value)
    if q.kind == "score":
        levels = [o.value for o in q.options]
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(levels):
            return value
        if isinstance(value, str) and value in levels:
            return levels.index(value)
        raise DataError(f"question {qid!r}: label {value!r} is not a level index 0..{len(levels) - 1} or a level")
    keys = [o.value for o in q.options]
    if isinstance(value, str) and value in keys:
        return keys.index(value)
    raise DataError(f"question {qid!r}: label {value!r} is not one of its options {keys}")
