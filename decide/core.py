"""The Python face of decide: load a model once, then decide requests.

>>> from decide.core import Decider, Question
>>> decider = Decider.load("smollm2-135m")
>>> decision = decider.decide("I was charged twice, please refund me.", [
...     Question.predicate("Is this a refund request?"),
...     Question.choice("Which team should take it?", ["billing", "technical", "sales"]),
... ])
>>> decision.answers[1].best.value
'billing'
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np

from .answers import Answer, Decision, Usage
from .bf16 import Precision
from .errors import ContextLengthExceeded, DecideError, InvalidRequest
from .prompts import Demonstration, PromptBuilder, TokenizedQuestion
from .quality import calibration, examples
from .quality.profile import Profile
from .request import DecisionRequest, Option, Part, Question, Text, refuse_images
from .scoring import ScoreResult
from .scoring.adapter import adapt, backends
from .scoring.generate import GreedyWriter
from .scoring.prompt_once import score_prompt_once
from .scoring.reference import score_reference
from .scoring.trie import TrieOptions, TrieScorer

__all__ = [
    "Decider",
    "Prepared",
    "DecisionRequest",
    "Question",
    "Option",
    "Text",
    "Decision",
    "Answer",
    "Usage",
    "ScorerName",
]

log = logging.getLogger("decide")
Written = tuple[tuple[Demonstration, ...], int]  # examples kept, tokens writing and checking them took
T = TypeVar("T")

ScorerName = Literal["auto", "reference", "prompt_once", "trie"]


@dataclass(frozen=True)
class DeciderOptions:
    """How a Decider scores. `auto` is the trie engine where the model adapter can tree-score the model.

    `calibration` (None: $DECIDE_CALIBRATION, else the measured default) and `profile` (a `decide fit`
    folder; None: $DECIDE_PROFILE, else none) change answer probabilities only (decide/quality/)."""

    scorer: ScorerName = "auto"
    trie: TrieOptions = field(default_factory=TrieOptions)
    # auto | float32 | bfloat16 | int8 of the weights and GEMMs (None: $DECIDE_PRECISION, else auto); see decide.bf16.
    precision: Precision | None = None
    # The kernels of the trie engine's passes: auto (the fastest that fits) or a name in scoring.adapter.backends.
    backend: str = "auto"
    calibration: str | None = None
    profile: str | Path | Profile | None = None

    def resolved(self) -> DeciderOptions:
        """These options with the calibration method checked and the profile read (from the environment
        where unset): a bad setting fails here, before a model loads."""
        method = calibration.check_method(
            self.calibration or os.environ.get("DECIDE_CALIBRATION") or calibration.DEFAULT
        )
        profile = self.profile or os.environ.get("DECIDE_PROFILE") or None
        if profile is not None and not isinstance(profile, Profile):
            profile = Profile.load(profile)
        return replace(self, calibration=method, profile=profile)

    def with_prefix_cache(self, cache_bytes: int) -> DeciderOptions:
        """These options with a prefix-cache budget of `cache_bytes`."""
        return replace(self, trie=replace(self.trie, cache_bytes=cache_bytes))


class Decider:
    """One loaded model and the machinery that scores requests with it. Thread-safe."""

    def __init__(self, loaded, options: DeciderOptions | None = None) -> None:
        self.loaded = loaded
        self.options = options or DeciderOptions()
        self.prompts = self._prompt_builder()
        adapted = self._adapt()
        self.parts = adapted.parts
        self.trie = TrieScorer(self.parts, self._cache_namespace(), self.options.trie) if adapted.tree else None
        if self.options.scorer == "auto":
            self.options = replace(self.options, scorer=adapted.scorer)
        self.options = self.options.resolved()
        if isinstance(self.options.profile, Profile):
            self.options.profile.check_model(self.loaded)
        self.calibrator = calibration.Calibrator(self.options.calibration, self.options.profile)
        self._lock = threading.Lock()
        self._writing: dict[Question, Generator[None, None, Written]] = {}  # examples being written, a step at a time

    def _demonstrations(self, q: Question):
        return self.calibrator.demonstrations(q)

    def with_profile(self, profile: Profile | None) -> Decider:
        """This decider (the same model, engine, caches and lock) answering with `profile` instead (None: without
        one, whatever $DECIDE_PROFILE says). A profile that shows demonstrations changes prompts, not only
        probabilities, so `decide eval` and `decide fit` score with both."""
        if profile is not None:
            profile.check_model(self.loaded)
        other = copy.copy(self)
        other.options = replace(self.options, profile=profile)
        other.calibrator = self.calibrator.with_profile(profile)
        other.prompts = other._prompt_builder()
        return other

    def with_calibration(self, method: str) -> Decider:
        """This decider answering with calibration `method` instead (the same model, caches and lock)."""
        other = copy.copy(self)
        other.options = replace(self.options, calibration=calibration.check_method(method))
        other.calibrator = self.calibrator.with_method(other.options.calibration)
        other.prompts = other._prompt_builder()
        return other

    def _prompt_builder(self) -> PromptBuilder:
        return PromptBuilder(self.loaded.tokenizer, stop_markers(self.loaded.tokenizer), self._demonstrations)

    def _adapt(self):
        m = self.loaded
        backend = backends.choose(m.device, m.dtype, m.precision, self.options.backend)
        # bf16 rounds the activations of a forest pass and of plain forwards differently: measured
        # 3.5e-3 of the largest hidden value on SmolLM2, where a wiring fault is off by ~1. At int8 those
        # last-bit differences flip int8 steps (each ~1% of a row's peak): measured 0.033 (qwen2.5-coder-1.5b)
        # and 0.058 (SmolLM2) on the self-test's random tokens.
        tolerance = {"bfloat16": 3e-2, "int8": 0.15}.get(m.precision, 1e-3)
        return adapt(m.model, backend, self.model_id, tolerance)

    def _cache_namespace(self) -> str:
        m = self.loaded
        return f"{m.model_id}|{m.dtype}|{m.precision}|{m.tokenizer.chat_template}"

    @classmethod
    def load(
        cls,
        model: str | None = None,
        options: DeciderOptions | None = None,
        *,
        profile: str | Path | Profile | None = None,
        **load_kwargs,
    ) -> Decider:
        """Load `model` (alias, folder, .gguf path or HF id; default: env DECIDE_MODEL, then the embedded 1.5B).
        `profile`: a `decide fit` folder fitted on this model (refused, with the reason, for another model)."""
        from .models import load_model

        options = options or DeciderOptions()
        if profile is not None:
            options = replace(options, profile=profile)
        options = options.resolved()  # a bad setting fails before the model loads
        return cls(load_model(model, precision=options.precision, **load_kwargs), options)

    @property
    def model_id(self) -> str:
        return self.loaded.model_id

    @property
    def supports_images(self) -> bool:
        return bool(getattr(self.loaded, "supports_images", False))

    @property
    def info(self) -> dict:
        m = self.loaded
        return {
            "model": m.model_id,
            "device": m.device,
            "dtype": m.dtype,
            "blas": m.blas,
            "precision": m.precision,
            "backend": m.backend,
            "context_length": m.context_length,
            "scorer": self.options.scorer,
            "calibration": self.calibrator.method,
            "profile_questions": len(self.calibrator.profile.entries) if self.calibrator.profile else 0,
        }

    def decide(
        self, request: DecisionRequest | str | Sequence[Part], questions: Iterable[Question] | None = None
    ) -> Decision:
        """Answer every question of `request` (or of `input` + `questions`)."""
        if not isinstance(request, DecisionRequest):
            if questions is None:
                raise InvalidRequest("questions are required when the first argument is the input", ("questions",))
            request = DecisionRequest.of(request, questions)
        [outcome] = self.decide_batch([self.prepare(request)])
        if isinstance(outcome, DecideError):
            raise outcome
        return outcome

    def prepare(self, request: DecisionRequest) -> Prepared:
        """Check and tokenize `request` without the model: raises UnsupportedInput or ContextLengthExceeded.
        Thread-safe and lock-free, so a server can refuse a request before it queues."""
        self._check_images(request)
        shown = self._shown(request)
        tokenized = self.prompts.tokenize(request)
        self._check_context(tokenized)
        return Prepared(request, tokenized, shown)

    def _shown(self, request: DecisionRequest) -> tuple:
        """The demonstrations each question of `request` is asked after, now."""
        return tuple(self._demonstrations(q) for q in request.questions)

    def decide_batch(
        self, requests: Sequence[DecisionRequest | Prepared], *, write_examples: bool = True
    ) -> list[Decision | DecideError]:
        """Answer several requests in one scoring run: the trie engine merges their forests into shared passes.

        Each request's answers equal `decide(request)`'s; a request that cannot run (images on a
        text model, too long) gets its typed error in its slot and does not stop the others.
        `write_examples=False`: questions whose examples are not written yet are asked without them (a server
        writes them between requests: `write_examples_step`) instead of after writing them now.
        """
        written = self._write_examples(requests) if write_examples else {}
        slots: list[Prepared | DecideError] = [self._try_prepare(r) for r in requests]
        ready = [p for p in slots if isinstance(p, Prepared)]
        priors = self._prior_jobs(ready)
        with self._lock:
            results = self._score_parts([*ready, *(p for _, p in priors)])
        self._learn_priors(priors, results[len(ready) :], results)
        self._count_writing(written, ready, results)
        decisions = iter(self._decision(p.request, p.tokenized, r) for p, r in zip(ready, results))
        return [next(decisions) if isinstance(p, Prepared) else p for p in slots]

    def _prior_jobs(self, ready: list[Prepared]) -> list[tuple[int, Prepared]]:
        """The content-free requests of questions whose calibration prior is not cached: (asking request, job)."""
        first_asker = {}
        for r, p in enumerate(ready):
            for q in p.request.questions:
                first_asker.setdefault(q, r)
        jobs = []
        for q, content_free in self.calibrator.missing(list(first_asker)):
            prepared = [self._try_prepare(c) for c in content_free]
            jobs += [(first_asker[q], p) for p in prepared if isinstance(p, Prepared)]
        return jobs

    def _learn_priors(self, jobs: list[tuple[int, Prepared]], scored: list[ScoreResult], results) -> None:
        """Cache each question's prior; its tokens are counted as computed for the request that asked first."""
        by_question: dict[Question, list] = {}
        for (asker, job), result in zip(jobs, scored):
            by_question.setdefault(job.request.questions[0], []).append(result.log_likelihoods[0])
            results[asker].computed_tokens += result.computed_tokens
        for q, lls in by_question.items():
            self.calibrator.learn(q, lls)

    def _write_examples(self, requests: Sequence[DecisionRequest | Prepared]) -> dict[Question, int]:
        """Write the examples the calibration shows and has not written yet (quality/examples.py): tokens by question."""
        todo = self.unwritten_examples([q for r in requests for q in _request(r).questions])
        if not todo:
            return {}
        written = {}
        with self._lock:
            for q in self.calibrator.unwritten(todo):  # again: another thread may have written them meanwhile
                steps = self._writing.pop(q, None) or self._written_and_checked(self._conversation(q))
                kept, written[q] = finish(steps)
                self.calibrator.learn_examples(q, kept)
        return written

    def unwritten_examples(self, questions: Sequence[Question]) -> list[Question]:
        """The distinct `questions` whose examples the calibration shows and has not written yet."""
        return self.calibrator.unwritten(questions)

    def write_examples_step(self, questions: Sequence[Question] = ()) -> bool:
        """One step (a model call: a written token, or a check) of the writing of the first of `questions` whose
        examples are not written yet (none given: of any question whose writing has begun); whether writing is
        left for them. A server calls this between requests, so that a new question's first requests need not
        wait minutes for its examples."""
        with self._lock:
            todo = self.calibrator.unwritten(questions) if questions else list(self._writing)
            if not todo:
                return False
            q = todo[0]
            if q not in self._writing:
                self._writing[q] = self._written_and_checked(self._conversation(q))
            try:
                next(self._writing[q])
            except StopIteration as done:
                self._stop_writing(q, done.value[0])
            except Exception:
                self._stop_writing(q, ())  # asked plainly from now on, rather than written again on every request
                raise
            return len(todo) > 1 or q in self._writing

    def _stop_writing(self, q: Question, kept: tuple[Demonstration, ...]) -> None:
        del self._writing[q]
        self.calibrator.learn_examples(q, kept)
        log.info("examples written for %r: %d kept", q.instructions[:60], len(kept))

    def _conversation(self, q: Question) -> examples.Conversation:
        tokenizer = self.loaded.tokenizer
        stops = examples.writing_stops(tokenizer, stop_markers(tokenizer))
        return examples.Conversation(tokenizer, GreedyWriter(self.loaded.model, stops, examples.MAX_TOKENS), q)

    def _written_and_checked(self, conversation: examples.Conversation) -> Generator[None, None, Written]:
        """Returns the examples the model wrote for the conversation's question that it answers as written, and the
        tokens writing and checking took; yields after each model call (a step). Each is first
        asked with the others shown; an example answered otherwise is written again (the model told how it was
        answered) and asked with the kept ones shown, up to examples.REWRITES times. A wrong example (a "false"
        statement that is true) would teach the wrong answer, and so would a set that leaves out more than one
        answer (the model maps the inputs of answers it was not shown onto those it was): then none. Examples are
        in the order written (examples.Conversation.requests)."""
        q = conversation.q
        written = []
        for option, request in conversation.requests():
            written.append(Demonstration((yield from conversation.ask(option, request)), option))
        asked = [(d, tuple(x for x in written if x is not d and x.input)) for d in written]
        answered, checked = yield from self._check(q, asked)
        for _ in range(examples.REWRITES):
            keeps = [examples.as_written(q, d.option, a) for d, a in zip(written, answered)]
            kept = tuple(d for d, keep in zip(written, keeps) if keep)
            again = [i for i, keep in enumerate(keeps) if not keep]
            if not again:
                break
            for i in again:
                k = written[i].option
                written[i] = Demonstration((yield from conversation.rewrite(k, answered[i])), k)
            answers, tokens = yield from self._check(q, [(written[i], kept) for i in again])
            checked += tokens
            for i, a in zip(again, answers):
                answered[i] = a
        kept = tuple(d for d, a in zip(written, answered) if examples.as_written(q, d.option, a))
        covered = len({d.option for d in kept})
        return (kept if covered >= max(2, len(q.options) - 1) else ()), conversation.writer.computed + checked

    def _check(
        self, q: Question, asked: list[tuple[Demonstration, tuple[Demonstration, ...]]]
    ) -> Generator[None, None, tuple[list[int | None], int]]:
        """Returns the model's answer to each (example, with these shown) (None for an empty example), and the
        tokens that took; yields after each (a model call, a step)."""
        answers: list[int | None] = [None] * len(asked)
        tokens = 0
        for i, (d, shown) in enumerate(asked):
            if d.input:
                [result] = self._score_many([[self.prompts.tokenize_question((Text(d.input),), q, shown)]])
                answers[i] = int(np.argmax(result.log_likelihoods[0]))
                tokens += result.computed_tokens
                yield None
        return answers, tokens

    def _count_writing(self, written: dict[Question, int], ready: list[Prepared], results: list[ScoreResult]) -> None:
        """Writing a question's examples is computed for the first request that asked it."""
        for q, tokens in written.items():
            asker = next((r for r, p in enumerate(ready) if q in p.request.questions), None)
            if asker is not None:
                results[asker].computed_tokens += tokens

    def _try_prepare(self, request: DecisionRequest | Prepared) -> Prepared | DecideError:
        if isinstance(request, Prepared) and request.shown == self._shown(request.request):
            return request
        try:
            return self.prepare(_request(request))
        except DecideError as e:
            return e

    def _check_images(self, request: DecisionRequest) -> None:
        if not self.supports_images:
            refuse_images(request.images, f"model {self.model_id}")

    def _check_context(self, tokenized: list[TokenizedQuestion]) -> None:
        limit = self.loaded.context_length
        for i, q in enumerate(tokenized):
            longest = len(q.prompt) + max(len(c) for c in q.candidates) - 1
            if longest > limit:
                raise ContextLengthExceeded(
                    f"question {i} needs {longest} tokens (prompt + longest answer) but the model's context is {limit}",
                    question_index=i,
                )

    def _score_parts(self, requests: list[Prepared]) -> list[ScoreResult]:
        """Score requests in parts, each answer in its question's slot. One-option questions are certain: they never
        reach the model. A request whose questions show different demonstrations is scored in one part per set of
        them, so that each part's prompts share their start (the question and its demonstrations) and the cache
        keeps it."""
        parts = [(r, idx) for r, p in enumerate(requests) for idx in self._parts(p.request.questions, p.tokenized)]
        scored = self._score_many([[requests[r].tokenized[i] for i in idx] for r, idx in parts])
        results = [
            ScoreResult([np.zeros(len(q.candidates)) for q in p.tokenized], [None] * len(p.tokenized)) for p in requests
        ]
        for (r, idx), part in zip(parts, scored):
            for i, lls in zip(idx, part.log_likelihoods):
                results[r].log_likelihoods[i] = lls
            for i, hidden in zip(idx, part.hidden):  # scorers that keep no hidden states leave it empty
                results[r].hidden[i] = hidden
            results[r].computed_tokens += part.computed_tokens
            results[r].cached_tokens += part.cached_tokens
            results[r].cache_write_tokens += part.cache_write_tokens
        return results

    def _parts(self, questions: Sequence[Question], tokenized: list[TokenizedQuestion]) -> list[list[int]]:
        by_shown: dict[tuple, list[int]] = {}
        for i, (q, t) in enumerate(zip(questions, tokenized)):
            if len(t.candidates) > 1:
                by_shown.setdefault(self._demonstrations(q), []).append(i)
        return list(by_shown.values())

    def _score_many(self, requests: list[list[TokenizedQuestion]]) -> list[ScoreResult]:
        scorer = self.options.scorer
        if scorer == "trie" and self.trie is not None:
            return self.trie.score_many(requests)
        if scorer == "reference":
            return [score_reference(self.loaded.model, questions) for questions in requests]
        if scorer == "prompt_once" and self.parts is not None:
            return [score_prompt_once(self.parts, self.loaded.model, questions) for questions in requests]
        raise InvalidRequest(f"scorer {scorer!r} cannot run model {self.model_id}", ("scorer",))

    def _decision(self, request: DecisionRequest, tokenized: list[TokenizedQuestion], result: ScoreResult) -> Decision:
        hidden = result.hidden or [None] * len(result.log_likelihoods)
        answers = tuple(
            Answer(
                q, tuple(float(p) for p in self.calibrator.probabilities(q, lls, h)), tuple(float(x) for x in lls), h
            )
            for q, lls, h in zip(request.questions, result.log_likelihoods, hidden)
        )
        usage = Usage(
            input_tokens=input_tokens(tokenized),
            cached_tokens=result.cached_tokens,
            cache_write_tokens=result.cache_write_tokens,
            computed_tokens=result.computed_tokens,
        )
        return Decision(model=self.model_id, answers=answers, usage=usage)


@dataclass(frozen=True)
class Prepared:
    """A checked, tokenized request, ready to score."""

    request: DecisionRequest
    tokenized: list[TokenizedQuestion]
    shown: tuple = ()  # per question, the demonstrations its prompt shows (written examples may come later)

    @property
    def input_tokens(self) -> int:
        return input_tokens(self.tokenized)


def _request(r: DecisionRequest | Prepared) -> DecisionRequest:
    return r.request if isinstance(r, Prepared) else r


def input_tokens(tokenized: list[TokenizedQuestion]) -> int:
    return sum(len(q.prompt) + sum(len(c) for c in q.candidates) for q in tokenized)


def stop_markers(tokenizer) -> list[str]:
    """Strings that end an assistant turn: the EOS token and the tokenizer's special tokens."""
    specials = list(getattr(tokenizer, "special_tokens", []) or [])
    return [tokenizer.eos_token, *[s for s in specials if s != tokenizer.eos_token]]


def finish(steps: Generator[None, None, T]) -> T:
    """Run a generator's remaining steps; what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
