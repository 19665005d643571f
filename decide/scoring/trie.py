"""The trie engine: every question and candidate of a request in one tree-masked forward.

    prompts ──► shared prefix (block-aligned) ──► prefix cache hit? reuse : compute causally, store
            ──► forest of the rest (native trie) ──► one forward, mask = prefix ∪ ancestors
            ──► LM head only at the rows whose children are scored ──► native gather

Large requests are cut into passes of at most `max_nodes` forest nodes; a question too big
for one pass is cut by candidates, and its normalizers are then always computed (a
logsumexp only cancels when all of a question's candidates are in the same forest).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from mlx_lm.models.cache import KVCache

from ..prompts import TokenizedQuestion
from ..runtime import mx
from . import ScoreResult, fast_kernels
from .forest import build_forest, candidate_scores, pair_logits, row_logsumexp
from .model_parts import ModelParts
from .prefix_cache import PrefixCache
from .tree_attention import forest_hidden, forest_mask


@dataclass(frozen=True)
class TrieOptions:
    max_nodes: int = 1024  # forest nodes per forward pass (the mask is nodes × (prefix + nodes))
    cache_bytes: int = 1 << 30  # prefix-cache budget
    block: int = 16  # prefix-cache granularity in tokens
    fast_kernels: bool = True  # attention softmax and SiLU on fast_kernels (checked at load by a self-test)


@dataclass(frozen=True)
class Job:
    """Some candidates of one question, scored in one pass."""

    question: int
    candidates: tuple[int, ...]
    split: bool  # the question's other candidates are in other jobs

    def cost(self, q: TokenizedQuestion, prefix_len: int) -> int:
        return len(q.prompt) - prefix_len + sum(len(q.candidates[c]) for c in self.candidates)


def common_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    first = np.asarray(seqs[0])
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        diff = np.flatnonzero(first[:n] != np.asarray(s[:n]))
        n = int(diff[0]) if diff.size else n
    return n


def plan_jobs(questions: Sequence[TokenizedQuestion], prefix_len: int, max_nodes: int) -> list[list[Job]]:
    """Pack questions (or candidate slices of big ones) into passes under the node budget."""
    passes: list[list[Job]] = [[]]
    used = 0
    for qi, q in enumerate(questions):
        whole = Job(qi, tuple(range(len(q.candidates))), split=False)
        jobs = [whole] if whole.cost(q, prefix_len) <= max_nodes else _split(qi, q, prefix_len, max_nodes)
        for job in jobs:
            cost = job.cost(q, prefix_len)
            if passes[-1] and used + cost > max_nodes:
                passes.append([])
                used = 0
            passes[-1].append(job)
            used += cost
    return passes


def _split(qi: int, q: TokenizedQuestion, prefix_len: int, max_nodes: int) -> list[Job]:
    room = max(1, max_nodes - (len(q.prompt) - prefix_len))
    jobs, chunk, size = [], [], 0
    for c, cand in enumerate(q.candidates):
        if chunk and size + len(cand) > room:
            jobs.append(Job(qi, tuple(chunk), split=True))
            chunk, size = [], 0
        chunk.append(c)
        size += len(cand)
    jobs.append(Job(qi, tuple(chunk), split=True))
    return jobs


@dataclass(frozen=True)
class ComputedNodes:
    """The forest nodes that must run through the model: those with a logits row, and their
    ancestors. Leaves (a candidate's last token, when no other candidate continues it) are
    dropped: nothing reads their logits and nothing attends to them."""

    tokens: np.ndarray
    positions: np.ndarray
    ancestors: np.ndarray  # bool[n, n], ancestor-or-self among the kept nodes
    rows: np.ndarray  # int32[R]: forest.rows renumbered to kept nodes

    @classmethod
    def of(cls, forest) -> ComputedNodes:
        full = forest.ancestor_mask()
        keep = full[forest.rows].any(axis=0)
        renumber = np.cumsum(keep) - 1
        return cls(
            tokens=forest.tokens[keep],
            positions=forest.positions[keep],
            ancestors=full[np.ix_(keep, keep)],
            rows=renumber[forest.rows].astype(np.int32),
        )


class TrieScorer:
    def __init__(self, parts: ModelParts, namespace: str, options: TrieOptions | None = None) -> None:
        self.parts = parts
        self.options = options or TrieOptions()
        self.cache = PrefixCache(namespace, self.options.cache_bytes, self.options.block)

    def score(self, questions: Sequence[TokenizedQuestion]) -> ScoreResult:
        result = ScoreResult(log_likelihoods=[np.zeros(len(q.candidates)) for q in questions])
        if not questions:
            return result
        prompts = [q.prompt for q in questions]
        shared = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        prefix_len = shared // self.options.block * self.options.block
        with fast_kernels.enabled() if self.options.fast_kernels else contextlib.nullcontext():
            kv = self._prefix(prompts[0][:prefix_len], result)
            for jobs in plan_jobs(questions, prefix_len, self.options.max_nodes):
                self._run_pass(questions, jobs, prefix_len, kv, result)
        return result

    def _prefix(self, tokens: Sequence[int], result: ScoreResult):
        """K/V of `tokens` per layer: from the cache, extended and stored when only partly there."""
        if not tokens:
            return None
        hit = self.cache.lookup(tokens)
        result.cached_tokens += hit.length
        if hit.length == len(tokens):
            return hit.kv
        caches = [KVCache() for _ in self.parts.layers]
        if hit.kv is not None:
            for c, (k, v) in zip(caches, hit.kv):
                c.state = (k, v, hit.length)
        self.parts.body(mx.array(tokens[hit.length :], dtype=mx.int32)[None], caches)
        kv = [
            (mx.contiguous(c.keys[..., : len(tokens), :]), mx.contiguous(c.values[..., : len(tokens), :]))
            for c in caches
        ]
        mx.eval(kv)
        result.computed_tokens += len(tokens) - hit.length
        if self.cache.store(tokens, kv):
            result.cache_write_tokens += len(tokens) - hit.length
        return kv

    def _run_pass(self, questions, jobs: list[Job], prefix_len: int, kv, result: ScoreResult) -> None:
        prompts = [questions[j.question].prompt for j in jobs]
        candidates = [[questions[j.question].candidates[c] for c in j.candidates] for j in jobs]
        forest = build_forest(prompts, candidates, prefix_len)
        nodes = ComputedNodes.of(forest)
        mask = forest_mask(nodes.ancestors, prefix_len)
        hidden = forest_hidden(self.parts.body, len(self.parts.layers), nodes.tokens, nodes.positions, mask, kv)
        logits = self.parts.head(hidden[mx.array(nodes.rows)]).astype(mx.float32)
        mx.eval(logits)
        logits_np = np.asarray(logits)
        needs_lse = forest.row_needs_lse.copy()
        if any(j.split for j in jobs):
            needs_lse[:] = 1
        lse = row_logsumexp(logits_np, needs_lse)
        picked = pair_logits(logits_np, forest.pair_rows, forest.pair_tokens)
        offsets = np.cumsum([0, *(len(j.candidates) for j in jobs)]).astype(np.int32)
        lls, _ = candidate_scores(picked, forest.pair_rows, lse, forest.cand_pair_offsets, offsets)
        for j, (lo, hi) in zip(jobs, zip(offsets[:-1], offsets[1:])):
            result.log_likelihoods[j.question][list(j.candidates)] = lls[lo:hi]
        result.computed_tokens += len(nodes.tokens)
