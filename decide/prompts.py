"""What is scored: the prompt of a question and its candidate continuations.

A question's prompt is one user turn — the input, a blank line, the question block —
rendered with the model's chat template (generation prompt on, thinking off). Candidate k
is JSON(option k) followed by the template's end-of-turn text, tokenized in one piece so
that merges at the join are the ones the model would produce.

A question a `decide fit` profile shows demonstrations for is asked as a series: the first user
turn holds the question block (worded for every input that follows) and the first demonstration's
input, each later turn one input alone, each demonstration answered by an assistant turn holding
its right answer's JSON, the input last. Everything before the input is then the same for every
input, so the prefix cache shares it: a request computes only its input and the candidates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .request import DecisionRequest, Image, Option, Part, Question, Text, refuse_images

_MARKER = "\u2063decide-ending-marker\u2063"
SERIES_LEAD = "Evaluate each input that follows, one at a time."


class ChatTokenizer(Protocol):
    eos_token: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str: ...


def json_value(value: str | bool) -> str:
    """Compact JSON as JavaScript's JSON.stringify writes it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def option_line(o: Option) -> str:
    return f"{json_value(o.value)} \u2014 {o.description}" if o.description else json_value(o.value)


def question_block(q: Question, lead: str = "Evaluate the preceding input.") -> str:
    lines = [lead, f"Question: {q.instructions}", q.spec.header]
    lines += [option_line(o) for o in q.options]
    lines.append("Answer with exactly one of the JSON values above. Do not explain.")
    return "\n".join(lines)


def user_turn(input: tuple[Part, ...], q: Question) -> str:
    """The user turn's text. Only text models are served: an image here is a caller error."""
    return text_of((*input, Text("\n\n" + question_block(q)), *q.attachments))


def text_of(parts: Sequence[Part]) -> str:
    refuse_images([((), p) for p in parts if isinstance(p, Image)], "this model")
    return "".join(p.text for p in parts)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Demonstration:
    """A labelled example shown before the input: its text and the index of its right option."""

    input: str
    option: int


def render_prompt(
    tokenizer: ChatTokenizer, input: tuple[Part, ...], q: Question, demonstrations: Sequence[Demonstration] = ()
) -> str:
    if not demonstrations:
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": user_turn(input, q)}], add_generation_prompt=True
        )
    task = text_of((Text(question_block(q, SERIES_LEAD)), *q.attachments, Text("\n\n")))
    turns = []
    for i, d in enumerate(demonstrations):
        turns.append({"role": "user", "content": (task if i == 0 else "") + d.input})
        turns.append({"role": "assistant", "content": json_value(q.options[d.option].value)})
    turns.append({"role": "user", "content": text_of(input)})
    return tokenizer.apply_chat_template(turns, add_generation_prompt=True)


def turn_ending(tokenizer: ChatTokenizer, stop_markers: list[str]) -> str:
    """The text a template puts after an assistant message, through its first stop marker.

    A dummy user turn follows the assistant turn so that templates which close a turn with
    the next role marker (GLM style) also show their stop. Falls back to the EOS token.
    """
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": _MARKER},
        {"role": "user", "content": "Hi"},
    ]
    try:
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    except Exception:  # templates may reject this layout; the EOS fallback is what they would emit
        return tokenizer.eos_token
    after = rendered.split(_MARKER, 1)[1] if _MARKER in rendered else ""
    hits = [(after.find(m), m) for m in stop_markers if m and m in after]
    if not hits:
        return tokenizer.eos_token
    at, marker = min(hits, key=lambda h: (h[0], -len(h[1])))
    return after[: at + len(marker)]


@dataclass(frozen=True)
class TokenizedQuestion:
    prompt: tuple[int, ...]
    candidates: tuple[tuple[int, ...], ...]


class PromptBuilder:
    """Turns requests into token sequences for one model's tokenizer and template."""

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        stop_markers: list[str],
        demonstrations: Callable[[Question], Sequence[Demonstration]] = lambda q: (),
    ) -> None:
        self.tokenizer = tokenizer
        self.ending = turn_ending(tokenizer, stop_markers)
        self.demonstrations = demonstrations

    def candidate_texts(self, q: Question) -> list[str]:
        return [json_value(o.value) + self.ending for o in q.options]

    def tokenize(self, request: DecisionRequest) -> list[TokenizedQuestion]:
        return [self.tokenize_question(request.input, q, self.demonstrations(q)) for q in request.questions]

    def tokenize_question(
        self, input: tuple[Part, ...], q: Question, demonstrations: Sequence[Demonstration] = ()
    ) -> TokenizedQuestion:
        """`q` about `input`, asked after `demonstrations` (whatever this builder would show)."""
        prompt = self.tokenizer.encode(render_prompt(self.tokenizer, input, q, demonstrations))
        candidates = tuple(tuple(self.tokenizer.encode(t)) for t in self.candidate_texts(q))
        return TokenizedQuestion(tuple(prompt), candidates)
