"""Runs one benchmark case on one scoring path and checks it against the oracles.

Paths: `reference` (every candidate its own forward), `prompt_once`, `trie` (prefix cache cleared
before every run) and `trie_warm` (the request's prefix already cached), all in float32; and
`trie_bf16`: the trie engine, cold, on the same model loaded in bfloat16 (decide/bf16.py), checked
against the same float32 oracles within the bf16 bounds.

Where a full oracle run would take many minutes, the oracle runs on a sample (bench/cases.py):
the reference on some candidates, prompt-once on some questions. Its single timed run is then
scaled to the whole request (`scale`: candidates or questions in the request / in the sample;
every sampled forward has about the request's prompt length), and answers are compared on the
sample: probabilities renormalized over the sampled candidates, and log-likelihood differences.
DECIDE_BENCH_FULL=1 runs every oracle on the whole request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from decide.answers import Decision, softmax
from decide.core import Decider, DeciderOptions
from decide.prompts import TokenizedQuestion
from decide.request import DecisionRequest
from decide.scoring.prompt_once import score_prompt_once
from decide.scoring.reference import score_reference
from decide.server.config import switched_on
from decide.server.memory import tame_malloc

from .cases import Case
from .work import ModelShape, Work, counting_parts, prompt_once_work, reference_work, trie_minimum

PROB_TOL = 1e-4
LL_TOL = 1e-3  # nats, on log-likelihood differences within a question
ENGINE_ONLY = partial(DeciderOptions, calibration="none")  # the scorers alone: no calibration prior in a timed run
BF16_PROB_TOL = 0.05  # bf16 against the float32 oracles (tests/server/test_bf16_models.py)
BF16_LL_TOL = 0.5


def as_served() -> None:
    """malloc tuned as the server and the CLI tune it (DECIDE_TUNE_MALLOC, on unless switched off), so an
    in-process timing is the server's: untuned, a long request's large buffers are mapped and page-faulted
    anew on every pass (SmolLM2's 255 options in bf16: 6.3-6.8 s against 6.1 s tuned)."""
    if switched_on("DECIDE_TUNE_MALLOC"):
        tame_malloc()


# question -> (candidate indices, log-likelihoods)
Scores = dict[int, tuple[np.ndarray, np.ndarray]]


@dataclass
class Outcome:
    scores: Scores
    tokens: int  # through the model for the whole request (by formula when the run was a sample)
    cached: int
    work: Work  # for the whole request
    scale: float = 1.0  # the whole request's time / the measured run's time (1.0: the whole request ran)


def scores_of(decision: Decision) -> Scores:
    return {
        q: (np.arange(len(a.log_likelihoods)), np.asarray(a.log_likelihoods, dtype=np.float64))
        for q, a in enumerate(decision.answers)
    }


def compare(got: Scores, want: Scores) -> tuple[float, float]:
    """(max probability error, max log-likelihood-difference error) over the questions and candidates both have."""
    prob_err = ll_err = 0.0
    compared = 0
    for q in want.keys() & got.keys():
        common = np.intersect1d(want[q][0], got[q][0])
        if len(common) < 2:
            continue
        g = _pick(got[q], common)
        w = _pick(want[q], common)
        prob_err = max(prob_err, float(np.abs(softmax(g) - softmax(w)).max()))
        ll_err = max(ll_err, float(np.abs((g - g[0]) - (w - w[0])).max()))
        compared += 1
    assert compared, "the two runs share no question with two or more candidates to compare"
    return prob_err, ll_err


def _pick(scores: tuple[np.ndarray, np.ndarray], candidates: np.ndarray) -> np.ndarray:
    idx, lls = scores
    order = np.argsort(idx)
    return lls[order[np.searchsorted(idx[order], candidates)]]


class Harness:
    def __init__(self, loaded, full_oracles: bool = False, loaded_bf16=None) -> None:
        self.loaded = loaded
        self.full_oracles = full_oracles
        self.shape = ModelShape.of(loaded.model)
        # Calibration off: the rows measure the scorers. The default calibration (`temperature`) adds, once per
        # new question, a scoring of it without input (its prior); it would land in whichever run comes first.
        self.deciders = {s: Decider(loaded, ENGINE_ONLY(scorer=s)) for s in ("reference", "prompt_once", "trie")}
        if loaded_bf16 is not None:
            self.deciders["trie_bf16"] = Decider(loaded_bf16, ENGINE_ONLY(scorer="trie"))
        self.trie_work = {name: Work() for name in ("trie", "trie_bf16")}
        for name, work in self.trie_work.items():
            trie = self.deciders[name].trie if name in self.deciders else None
            if trie is not None:
                trie.parts = counting_parts(trie.parts, work)
        self.oracles: dict[tuple[str, str], Outcome] = {}
        self._requests: dict[str, tuple[DecisionRequest, list[TokenizedQuestion]]] = {}

    @property
    def has_trie(self) -> bool:
        return self.deciders["trie"].trie is not None

    def runs(self, path: str) -> bool:
        """Can `path` run here? (the trie needs a model it fits, trie_bf16 the bf16 backend)"""
        if path == "trie_bf16":
            return "trie_bf16" in self.deciders and self.deciders["trie_bf16"].trie is not None
        return self.has_trie or not path.startswith("trie")

    def request(self, case: Case) -> tuple[DecisionRequest, list[TokenizedQuestion]]:
        if case.name not in self._requests:
            request = case.build()
            self._requests[case.name] = (request, self.deciders["trie"].prompts.tokenize(request))
        return self._requests[case.name]

    def sampled(self, case: Case, path: str) -> bool:
        sample = {"reference": case.reference_sample, "prompt_once": case.prompt_once_sample}.get(path)
        return sample is not None and not self.full_oracles

    def runner(self, case: Case, path: str) -> Callable[[], Outcome]:
        request, tokenized = self.request(case)
        if path == "reference" and self.sampled(case, path):
            return lambda: self._reference_sample(tokenized, case.reference_sample)
        if path == "prompt_once" and self.sampled(case, path):
            return lambda: self._prompt_once_sample(tokenized, case.prompt_once_sample)
        if path in ("reference", "prompt_once"):
            work = (reference_work if path == "reference" else prompt_once_work)(tokenized)
            return lambda: self._decide(path, request, work)
        return lambda: self._trie(request, "trie_bf16" if path == "trie_bf16" else "trie")

    def setup(self, path: str) -> Callable[[], None] | None:
        """Before every timed run: a cold trie starts from an empty prefix cache."""
        return self.deciders[path].trie.cache.clear if path in ("trie", "trie_bf16") else None

    def check(self, case: Case, path: str, outcome: Outcome) -> tuple[float, float]:
        """Compare with the reference (and, for the trie, with prompt-once when it has run); assert the bounds."""
        wants = [self.oracle(case, "reference")]
        if path.startswith("trie") and (case.name, "prompt_once") in self.oracles:
            wants.append(self.oracles[(case.name, "prompt_once")])
        errors = [compare(outcome.scores, want.scores) for want in wants]
        prob_err, ll_err = (max(e[i] for e in errors) for i in (0, 1))
        prob_tol, ll_tol = (BF16_PROB_TOL, BF16_LL_TOL) if path == "trie_bf16" else (PROB_TOL, LL_TOL)
        assert prob_err <= prob_tol, f"{case.name}/{path}: probabilities differ from the oracle by {prob_err:.2e}"
        assert ll_err <= ll_tol, f"{case.name}/{path}: log-likelihood differences off by {ll_err:.2e}"
        return prob_err, ll_err

    def oracle(self, case: Case, path: str) -> Outcome:
        """The stored oracle run, computed (untimed) when the benchmark that times it did not run."""
        key = (case.name, path)
        if key not in self.oracles:
            self.oracles[key] = self.runner(case, path)()
        return self.oracles[key]

    def info(self, case: Case, path: str, outcome: Outcome, errors: tuple[float, float]) -> dict:
        """What the summary needs, saved in the benchmark's extra_info."""
        request, tokenized = self.request(case)
        w = outcome.work
        return {
            "model": self.loaded.model_id,
            "case": case.name,
            "path": path,
            "questions": len(tokenized),
            "candidates": sum(len(q.candidates) for q in tokenized),
            "prompt_tokens": [len(q.prompt) for q in tokenized],
            "trie_minimum": trie_minimum(tokenized),
            "tokens": outcome.tokens,
            "cached_tokens": outcome.cached,
            "work_tokens": w.tokens,
            "head_rows": w.head_rows,
            "keys": w.keys,
            "flops": w.flops(self.shape),
            "scale": outcome.scale,
            "sampled": outcome.scale != 1.0,
            "prob_err": errors[0],
            "ll_err": errors[1],
            "checked": True,
        }

    def _decide(self, scorer: str, request: DecisionRequest, work: Work) -> Outcome:
        usage = (decision := self.deciders[scorer].decide(request)).usage
        return Outcome(scores_of(decision), usage.computed_tokens, usage.cached_tokens, work)

    def _trie(self, request: DecisionRequest, name: str) -> Outcome:
        self.trie_work[name].reset()  # counted afresh by the wrapped body and head
        decision = self.deciders[name].decide(request)
        work = replace(self.trie_work[name])
        return Outcome(scores_of(decision), decision.usage.computed_tokens, decision.usage.cached_tokens, work)

    def _reference_sample(self, tokenized: list[TokenizedQuestion], sample) -> Outcome:
        picked = [(q, np.arange(len(tokenized[q].candidates)) if c is None else np.array(c)) for q, c in sample]
        sub = [
            TokenizedQuestion(tokenized[q].prompt, tuple(tokenized[q].candidates[i] for i in idx)) for q, idx in picked
        ]
        result = score_reference(self.loaded.model, sub)
        work = reference_work(tokenized)
        scale = sum(len(q.candidates) for q in tokenized) / sum(len(idx) for _, idx in picked)
        scores = {q: (idx, lls) for (q, idx), lls in zip(picked, result.log_likelihoods)}
        return Outcome(scores, work.tokens, 0, work, scale)

    def _prompt_once_sample(self, tokenized: list[TokenizedQuestion], sample: tuple[int, ...]) -> Outcome:
        parts = self.deciders["prompt_once"].parts
        result = score_prompt_once(parts, self.loaded.model, [tokenized[q] for q in sample])
        work = prompt_once_work(tokenized)
        scores = {q: (np.arange(len(lls)), lls) for q, lls in zip(sample, result.log_likelihoods)}
        return Outcome(scores, work.tokens, 0, work, len(tokenized) / len(sample))
