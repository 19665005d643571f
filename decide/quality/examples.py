"""Written examples: the model writes example inputs for each answer, then sees them as demonstrations.

A small model reads a question's options its own way (TREC's `description` is never chosen, a
review's `true` is a habit). Shown labelled examples, it reads them as the question means them;
without labels, the model can write the examples itself (Self-ICL, Chen et al. 2023; Z-ICL, Lyu
et al. 2023): once per distinct question, before its first answer, it is asked in one conversation
for a typical input whose right answer is each option in turn, each different from those it wrote
before (greedy, so the same question always gets the same examples), going round the options ROUNDS
times; an input that repeats an earlier one counts as not written. A small model also writes
wrong examples (a "false" statement that is true), which would teach the wrong answer, so each is
then asked with the others shown and kept only if the model answers it as written. One answered
otherwise is written again, the model told how it was answered, and kept if answered as written
with the kept ones shown (REWRITES rounds). Unless all answers but one keep their example, none is
shown: a set that leaves out more answers teaches the model not to use them (measured: TREC's
`human` questions went to `entity` when only `description` and `number` were shown;
decide.core.Decider._written_and_checked). The question is then asked as the
series of decide/prompts.py with the kept examples answered. The examples and the question block
sit before the input, so the prefix cache keeps them: a later request computes its input and the
candidates only. The library writes them in a question's first request; a server writes them a step (a token,
or a check) at a time between requests and answers the question without them meanwhile (decide/server/engine.py).

Written for questions of 2 to MAX_OPTIONS options without attachments; others are asked plainly.
"""

from __future__ import annotations

import re
from collections.abc import Generator

from ..prompts import ChatTokenizer, json_value, option_line
from ..request import Question
from ..scoring.generate import GreedyWriter

MAX_OPTIONS = 12  # a longer option list costs ROUNDS written inputs per option: asked plainly instead
MAX_TOKENS = 64  # per written input
REWRITES = 2  # rounds of writing again the inputs the model answers otherwise
ROUNDS = 2  # inputs written per option, one round of the options after another (README: +1.7 points, 9 wordings)
FIRST = (
    "Inputs are judged by this question:\n"
    "Question: {instructions}\n"
    "{header}\n"
    "{options}\n\n"
    "Invent a typical input whose right answer is clearly {target}: "
    "write it as it would appear, with no quotes, labels or explanation."
)
NEXT = (
    "Now invent a typical input whose right answer is clearly {target}, different from the inputs above: "
    "write it as it would appear, with no quotes, labels or explanation."
)
REWRITE = (
    "The input you wrote for {target} would be judged {answered}. Now invent another typical input whose right "
    "answer is clearly {target}, not {answered}, different from the inputs above: "
    "write it as it would appear, with no quotes, labels or explanation."
)
REPLY_START = "Here is one:\n\n"  # each reply begun, so that it starts with the input, not a refusal
QUOTES = "\"'`\u201c"
CLOSING = {"\u201c": "\u201d"}  # other quotes close with themselves
# a leading one-word label ("Question:", "**Input:**") or markdown emphasis around the whole text: not part of the input
LABEL = re.compile(r"^(\*\*|__)?[A-Z][a-z]+:(\*\*|__)?\s+")
EMPHASIS = ("**", "__", "*", "_")


def writes_for(q: Question) -> bool:
    return 1 < len(q.options) <= MAX_OPTIONS and not q.attachments


def as_written(q: Question, option: int, answered: int | None) -> bool:
    """Whether the check's answer to the example written for `option` keeps it. On an ordered scale a neighbouring
    level is a matter of degree, not a wrong example: kept, its level the one the writer meant (measured: exact
    levels only left SST-5's `bad` without an example, and its reviews went to `terrible`)."""
    if answered is None:
        return False
    return answered == option or (q.kind == "score" and abs(answered - option) == 1)


def target(q: Question, option: int) -> str:
    """How the writing requests name an option; a scale's level also by its place, which a bare level ("2") does not
    say (measured: SST-5 over 1 … 5, 0.327 → 0.360)."""
    o = q.options[option]
    text = json_value(o.value) + (f" ({o.description})" if o.description else "")
    if q.kind == "score":
        text += f" (level {option + 1} of {len(q.options)}, counted from the lowest)"
    return text


def writing_request(q: Question, option: int) -> str:
    """The user turn that asks for an input whose right answer is option `option` (after those of the options
    before it)."""
    if option > 0:
        return NEXT.format(target=target(q, option))
    options = "\n".join(option_line(x) for x in q.options)
    return FIRST.format(instructions=q.instructions, header=q.spec.header, options=options, target=target(q, 0))


def rewriting_request(q: Question, option: int, answered: int | None) -> str:
    """The user turn that asks again for an input of option `option`, its last having been answered `answered`
    (None: it came out empty)."""
    if answered is None:
        return NEXT.format(target=target(q, option))
    return REWRITE.format(answered=target(q, answered), target=target(q, option))


def cleaned(text: str) -> str:
    """The written input: its first paragraph, without a leading label, enclosing emphasis, quotes or blanks."""
    text = LABEL.sub("", text.strip().split("\n\n")[0].strip())
    for mark in EMPHASIS:
        if len(text) > 2 * len(mark) and text.startswith(mark) and text.endswith(mark):
            text = text[len(mark) : -len(mark)].strip()
            break
    if text and text[0] in QUOTES:  # to its closing quote at a line's end: an explanation may follow on the next line
        closing = closing_quote(text)
        text = text[1 : 1 + closing.start()] if closing else text[1:]
    return text.strip()


def closing_quote(text: str) -> re.Match | None:
    """In `text`, which starts with a quote: the quote that closes it at a line's end (and that line end), in text[1:]."""
    return re.search(re.escape(CLOSING.get(text[0], text[0])) + r"[ \t]*(\n|$)", text[1:])


def finished(text: str) -> bool:
    """Whether a reply is written to the end of what `cleaned` keeps of it: its first paragraph is over, or its quoted
    input closed at a line's end (an explanation follows). Writing on would not change the example, only take
    time: explanations after a quoted input ran to MAX_TOKENS."""
    text = text.lstrip()
    if "\n\n" in text.rstrip():
        return True
    closing = closing_quote(text) if text and text[0] in QUOTES else None
    return closing is not None and closing.group(1) == "\n"


def same_text(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def writing_prompt(tokenizer: ChatTokenizer, chat: list[dict], request: str) -> str:
    """The conversation `chat` (user and assistant turns) followed by the user turn `request`, its reply begun."""
    turns = [*chat, {"role": "user", "content": request}]
    return tokenizer.apply_chat_template(turns, add_generation_prompt=True) + REPLY_START


class Conversation:
    """One question's writing: each request a user turn, each written input the assistant's reply, greedy."""

    def __init__(self, tokenizer: ChatTokenizer, writer: GreedyWriter, q: Question) -> None:
        self.tokenizer, self.writer, self.q = tokenizer, writer, q
        self.chat: list[dict] = []
        self.first_tokens: dict[int, set[int]] = {}  # by option: the first token of each input written for it

    def requests(self) -> list[tuple[int, str]]:
        """(option, user turn) of each input to write: ROUNDS per option, one for each option in option order, then
        again."""
        n = len(self.q.options)
        again = [NEXT.format(target=target(self.q, k)) for k in range(n)] * (ROUNDS - 1)
        return [(i % n, r) for i, r in enumerate([writing_request(self.q, k) for k in range(n)] + again)]

    def rewrite(self, option: int, answered: int | None) -> Generator[None, None, str]:
        """Another input for `option`, its last having been answered `answered` (steps as `ask`). It starts with another
        token than those written for `option` before: told to write another, a small model repeats its last word
        for word."""
        return (yield from self.ask(option, rewriting_request(self.q, option, answered)))

    def ask(self, option: int, request: str) -> Generator[None, None, str]:
        """Returns the model's reply to `request`, an input for `option` ("" if it repeats an earlier one); yields
        after each model call (GreedyWriter.continue_from)."""
        prompt = self.tokenizer.encode(writing_prompt(self.tokenizer, self.chat, request))
        firsts = self.first_tokens.setdefault(option, set())
        ids = yield from self.writer.continue_from(prompt, lambda ids: finished(self.tokenizer.decode(ids)), firsts)
        firsts.update(ids[:1])
        text = cleaned(self.tokenizer.decode(ids))
        repeated = any(same_text(text, turn["content"]) for turn in self.chat if turn["role"] == "assistant")
        self.chat += [{"role": "user", "content": request}, {"role": "assistant", "content": text}]
        return "" if repeated else text


def writing_stops(tokenizer, stop_markers: list[str]) -> list[int]:
    """The token ids that end a written input: the stop markers that are single tokens."""
    ids = (tokenizer.encode(m) for m in stop_markers if m)
    return sorted({t[0] for t in ids if len(t) == 1})
