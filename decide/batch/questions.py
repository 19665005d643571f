"""The questions of a batch: one JSON file, System One or OpenAI Decisions, validated by the wire parsers.

Accepted shapes (the protocol is detected from the shape of `questions`):

    {"questions": {"refund": {"type": "noul", ...}, ...}}      System One (an object of questions by id)
    {"refund": {"type": "noul", ...}, ...}                      the same, bare
    {"questions": [{"type": "predicate", ...}, ...]}            OpenAI Decisions (a list of questions)
    [{"type": "predicate", ...}, ...]                           the same, bare

Other top-level fields of a wrapped file (`model`, `assets`, ...) are sent with every row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..answers import Decision
from ..errors import ContextLengthExceeded, DecideError, InvalidRequest
from ..wire import openai, systemone
from ..wire.common import OPENAI_ALIAS, SYSTEMONE_ALIAS

Protocol = Literal["systemone", "openai"]
ROUTES = {"systemone": "/v1/systemone", "openai": "/v1/decisions"}
INPUT_FIELD = {"systemone": "state", "openai": "input"}
PROBE_TEXT = "A text."


class BadRow(Exception):
    """A row that cannot be answered; it becomes an error record and the run goes on."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.record = {"type": kind, "message": message}


@dataclass(frozen=True)
class QuestionSet:
    """A validated question file: makes each row's request body and parses it as the server would."""

    protocol: Protocol
    template: dict  # the request body without its input

    @classmethod
    def from_json(cls, data: Any) -> QuestionSet:
        """Detect the protocol and validate the questions; raises ValueError with what is wrong."""
        if isinstance(data, list) or (isinstance(data, dict) and isinstance(data.get("questions"), list)):
            protocol: Protocol = "openai"
        elif isinstance(data, dict) and data and "questions" not in data:
            protocol, data = "systemone", {"questions": data}
        elif isinstance(data, dict) and isinstance(data.get("questions"), dict):
            protocol = "systemone"
        else:
            raise ValueError(
                "expected System One questions (an object of questions by id) or OpenAI Decisions questions "
                '(a list), bare or under "questions"'
            )
        body = {"questions": data} if isinstance(data, list) else dict(data)
        body.setdefault("model", SYSTEMONE_ALIAS if protocol == "systemone" else OPENAI_ALIAS)
        body.pop(INPUT_FIELD[protocol], None)
        questions = cls(protocol, body)
        try:
            questions.parse(PROBE_TEXT)
        except BadRow as e:
            raise ValueError(e.record["message"]) from None
        return questions

    @classmethod
    def load(cls, path: str | Path) -> QuestionSet:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise ValueError(f"cannot read {path}: {e.strerror}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from None
        try:
            return cls.from_json(data)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    @property
    def route(self) -> str:
        return ROUTES[self.protocol]

    def body(self, text: str) -> dict:
        return {**self.template, INPUT_FIELD[self.protocol]: text}

    def parse(self, text: Any):
        """The row's parsed request (systemone.Parsed or openai.Parsed); BadRow if the text cannot be asked."""
        if not isinstance(text, str):
            raise BadRow("invalid_text", f"the text is {'missing' if text is None else type(text).__name__}")
        if not text.strip():
            raise BadRow("empty_text", "the text is empty")
        try:
            if self.protocol == "openai":
                return openai.parse(self.body(text))
            return systemone.parse(self.body(text))
        except systemone.ValidationFailed as e:
            raise BadRow("validation_error", str(e)) from None
        except systemone.UsageError as e:
            raise BadRow("api_usage_error", e.message) from None
        except InvalidRequest as e:  # OpenAI's messages name the offending parameter themselves
            raise BadRow(e.code, e.message) from None

    def render(self, decision: Decision, parsed) -> dict:
        """The answer record: the protocol's response `answers` and `usage`."""
        wire = openai if self.protocol == "openai" else systemone
        body = wire.render(decision, parsed)
        return {"answers": body["answers"], "usage": body["usage"], "error": None}


def error_record(error: DecideError | BadRow) -> dict:
    if isinstance(error, BadRow):
        record = error.record
    elif isinstance(error, ContextLengthExceeded):
        record = {"type": "context_length_exceeded", "message": error.message}
    else:
        record = {"type": getattr(error, "code", "invalid_request"), "message": str(error)}
    return {"answers": None, "usage": None, "error": record}
