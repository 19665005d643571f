"""The trie engine: every question and candidate of a request in one tree-masked forward.

    prompts ──► shared prefix (block-aligned) ──► prefix cache: the longest stored part of it
            ──► forest (native trie) of the rest: the prefix's uncached tail first, as a causal chain
            ──► one forward, mask = cached prefix ∪ ancestors ──► the chain's K/V into the cache
            ──► LM head only at the rows whose children are scored ──► native gather

A cold prefix thus costs no forward of its own (one pass of many rows keeps the matmuls busier
than two of half as many). Its chain attends causally and every other node sees it whole, exactly as a
cached prefix, so cold and warm answers agree. A prefix longer than PREFIX_CHUNK, or one under a
request that takes several passes, is computed on its own first, in chunks; so is the start that
the prefixes of several requests share (one input asked about in several requests), once.

Large requests are cut into passes of at most `max_nodes` forest nodes; a question too big
for one pass is cut by candidates, and its normalizers are then always computed (a
logsumexp only cancels when all of a question's candidates are in the same forest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from mlx_lm.models.cache import KVCache

from ..prompts import TokenizedQuestion
from ..runtime import mx
from . import ScoreResult
from .adapter import ModelParts
from .adapter.forest_pass import Block, CausalCache, causal_forward, forest_forward, forest_mask
from .forest import build_forest, candidate_scores, pair_logits, row_logsumexp
from .prefix_cache import Hit, PrefixCache

PREFIX_CHUNK = 2048  # prefix tokens per causal forward: bounds the activations, long enough for efficient matmuls


@dataclass(frozen=True)
class TrieOptions:
    max_nodes: int = 2048  # forest nodes per forward pass (the mask is nodes × (prefix + nodes))
    max_width: int = 4096  # attended columns (prefixes + nodes) when passes of several prefixes are merged
    cache_bytes: int = 1 << 30  # prefix-cache budget
    block: int = 16  # prefix-cache granularity in tokens


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
    kept: np.ndarray  # bool[forest.num_nodes]

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
            kept=keep,
        )


@dataclass(frozen=True)
class Segment:
    """One pass's jobs over one shared prefix: the questions of every request whose prompts share that prefix.

    The prefix's first `cached` tokens have their K/V in `kv`; the rest (its `chain`) runs in this pass, as the
    forest's first nodes, and is stored in the prefix cache after it: one forward instead of two."""

    prefix_len: int
    kv: list | None  # per layer (K, V) of the first `cached` prefix tokens, None when there are none
    cached: int
    questions: list[TokenizedQuestion]
    owners: list[list[tuple[int, int]]]  # per question: the (request, question index) slots that asked it
    jobs: list[Job]

    @property
    def chain(self) -> int:
        return self.prefix_len - self.cached

    def cost(self) -> int:
        return self.chain + sum(j.cost(self.questions[j.question], self.prefix_len) for j in self.jobs)


class TrieScorer:
    def __init__(self, parts: ModelParts, namespace: str, options: TrieOptions | None = None) -> None:
        self.parts = parts
        self.options = options or TrieOptions()
        self.cache = PrefixCache(namespace, self.options.cache_bytes, self.options.block)

    def score(self, questions: Sequence[TokenizedQuestion]) -> ScoreResult:
        return self.score_many([questions])[0]

    def score_many(self, requests: Sequence[Sequence[TokenizedQuestion]]) -> list[ScoreResult]:
        """Score several requests together: requests with the same prefix share one forest, and the
        forests of different prefixes share forward passes (block-diagonal mask) while they fit."""
        results = [
            ScoreResult(log_likelihoods=[np.zeros(len(q.candidates)) for q in qs], hidden=[None] * len(qs))
            for qs in requests
        ]
        segments = [seg for group in self._groups(requests, results) for seg in group]
        for merged in self._merge(segments):
            self._run_pass(merged, results)
        return results

    def _prefix_tokens(self, questions: Sequence[TokenizedQuestion]) -> tuple[int, ...]:
        prompts = [q.prompt for q in questions]
        shared = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        return tuple(prompts[0][: shared // self.options.block * self.options.block])

    def _groups(self, requests: Sequence[Sequence[TokenizedQuestion]], results: list[ScoreResult]):
        """Per distinct prefix: its K/V (computed by the first request that needs it) and its passes."""
        by_prefix: dict[tuple[int, ...], list[int]] = {}
        for r, questions in enumerate(requests):
            if questions:
                by_prefix.setdefault(self._prefix_tokens(questions), []).append(r)
        owed = self._extend_stems(by_prefix, results)
        for prefix, members in by_prefix.items():
            owners: dict[TokenizedQuestion, list[tuple[int, int]]] = {}  # the same question is scored once
            for r in members:
                for i, q in enumerate(requests[r]):
                    owners.setdefault(q, []).append((r, i))
            questions = list(owners)
            passes = plan_jobs(questions, len(prefix), self.options.max_nodes)
            hit = self._lookup(prefix, results[members[0]])
            results[members[0]].cached_tokens -= min(owed.get(members[0], 0), hit.length)  # its own stems
            for r in members[1:]:
                results[r].cached_tokens += len(prefix)
            segments = [Segment(len(prefix), hit.kv, hit.length, questions, list(owners.values()), j) for j in passes]
            first = segments[0]
            if first.chain and (
                len(segments) > 1 or first.chain > PREFIX_CHUNK or first.cost() > self.options.max_nodes
            ):
                kv = self._extend(prefix, hit, results[members[0]])
                segments = [replace(seg, kv=kv, cached=len(prefix)) for seg in segments]
            yield segments

    def _extend_stems(self, by_prefix: dict[tuple[int, ...], list[int]], results: list[ScoreResult]) -> dict[int, int]:
        """Compute and cache, once, each uncached block-aligned start that several distinct prefixes share
        (the same input asked about in several requests, a profile's demonstrations), shortest first, so
        that their groups find it in the cache instead of each computing it in its own chain.
        Returns the tokens computed per request that asked first: its own lookup will count them as cached."""
        ordered = sorted(by_prefix)
        stems = set()
        for a, b in zip(ordered, ordered[1:]):
            shared = common_prefix_length([a, b]) // self.options.block * self.options.block
            stems.add(a[:shared])
        owed: dict[int, int] = {}
        for stem in sorted(stems - {()}, key=len):
            hit = self.cache.lookup(stem, counted=False)
            if hit.length < len(stem):
                first = next(members[0] for prefix, members in by_prefix.items() if prefix[: len(stem)] == stem)
                self._extend(stem, hit, results[first])
                owed[first] = owed.get(first, 0) + len(stem) - hit.length
        return owed

    def _merge(self, segments: list[Segment]) -> list[list[Segment]]:
        """Consecutive segments per forward pass, within max_nodes forest nodes and max_width attended columns."""
        merged: list[list[Segment]] = []
        nodes = width = 0
        for seg in segments:
            cost = seg.cost()
            if (
                merged
                and nodes + cost <= self.options.max_nodes
                and width + cost + seg.cached <= self.options.max_width
            ):
                merged[-1].append(seg)
                nodes, width = nodes + cost, width + cost + seg.cached
            else:
                merged.append([seg])
                nodes, width = cost, cost + seg.cached
        return merged

    def _lookup(self, tokens: Sequence[int], result: ScoreResult) -> Hit:
        if not tokens:
            return Hit(0, None)
        hit = self.cache.lookup(tokens)
        result.cached_tokens += hit.length
        return hit

    def _extend(self, tokens: Sequence[int], hit: Hit, result: ScoreResult) -> list:
        """K/V of `tokens` per layer, computed causally on top of the cached `hit`, and stored."""
        kvs = [KVCache() for _ in self.parts.layers]
        if hit.kv is not None:
            for c, (k, v) in zip(kvs, hit.kv):
                c.state = (k, v, hit.length)
        caches = [CausalCache(kv, self.parts.backend) for kv in kvs]
        for start in range(hit.length, len(tokens), PREFIX_CHUNK):
            # In chunks: each attends only to the keys before it (where attention runs in MLX ops, a
            # causal mask over the whole prefix would compute, then discard, the upper triangle).
            causal_forward(self.parts.body, caches, tokens[start : start + PREFIX_CHUNK])
            mx.eval([c.state for c in kvs])
        result.computed_tokens += len(tokens) - hit.length
        return self._store(
            tokens, hit.length, [(c.keys[..., : len(tokens), :], c.values[..., : len(tokens), :]) for c in kvs], result
        )

    def _store(self, tokens: Sequence[int], cached: int, kv: list, result: ScoreResult) -> list:
        """Keep the K/V of `tokens` (the first `cached` were stored before); returns them, contiguous."""
        kv = [(mx.contiguous(k), mx.contiguous(v)) for k, v in kv]
        mx.eval(kv)
        if self.cache.store(tokens, kv):
            result.cache_write_tokens += len(tokens) - cached
        return kv

    def _run_pass(self, segments: list[Segment], results: list[ScoreResult]) -> None:
        built = [_SegmentForest.of(seg) for seg in segments]
        blocks = [Block(seg.kv, seg.cached, len(b.nodes.tokens), seg.chain) for seg, b in zip(segments, built)]
        tokens = np.concatenate([b.nodes.tokens for b in built])
        positions = np.concatenate([b.nodes.positions for b in built])
        mask = forest_mask(blocks, [b.nodes.ancestors for b in built])
        starts = _starts(built)
        answer_rows = np.concatenate([b.answer_rows() + start for b, start in zip(built, starts)])
        taps = self.parts.readout_layers[:-1]  # the last is the body's output
        forward = forest_forward(
            self.parts.body,
            len(self.parts.layers),
            tokens,
            positions,
            blocks,
            mask,
            self.parts.backend,
            taps,
            answer_rows,
        )
        row_nodes = np.concatenate([b.nodes.rows + start for b, start in zip(built, starts)])
        logits = self.parts.head(forward.hidden[mx.array(row_nodes)]).astype(mx.float32)
        states = [forward.taps[layer] for layer in taps] + [forward.hidden[mx.array(answer_rows)]]
        hidden = mx.stack(states, axis=1).astype(mx.float32)  # [jobs, readout layers, D]
        mx.eval(logits, hidden)
        for i, seg in enumerate(segments):
            if seg.chain:
                self._store_chain(seg, forward.chain_kv(i), results)
        logits_np, hidden_np = np.asarray(logits), np.asarray(hidden)
        first_row = first_job = 0
        for seg, b in zip(segments, built):
            rows = len(b.forest.rows)
            b.gather(seg, logits_np[first_row : first_row + rows], results)
            b.keep_hidden(seg, hidden_np[first_job : first_job + len(seg.jobs)], self.parts.readout_layers, results)
            first_row += rows
            first_job += len(seg.jobs)

    def _store_chain(self, seg: Segment, chain_kv: list, results: list[ScoreResult]) -> None:
        """Store the prefix whose tail (chain) this pass computed; its tokens were counted as forest nodes."""
        kv = chain_kv
        if seg.kv is not None:
            kv = [
                (mx.concatenate([pk, ck], axis=2), mx.concatenate([pv, cv], axis=2))
                for (pk, pv), (ck, cv) in zip(seg.kv, chain_kv)
            ]
        self._store(seg.questions[0].prompt[: seg.prefix_len], seg.cached, kv, results[seg.owners[0][0][0]])


@dataclass(frozen=True)
class _SegmentForest:
    forest: object
    nodes: ComputedNodes

    @classmethod
    def of(cls, seg: Segment) -> _SegmentForest:
        prompts = [seg.questions[j.question].prompt for j in seg.jobs]
        candidates = [[seg.questions[j.question].candidates[c] for c in j.candidates] for j in seg.jobs]
        forest = build_forest(prompts, candidates, seg.cached)
        return cls(forest, ComputedNodes.of(forest))

    def answer_rows(self) -> np.ndarray:
        """Per job, the computed node of its prompt's last token (kept: its logits row is read)."""
        return (np.cumsum(self.nodes.kept) - 1)[self.forest.prompt_last_nodes]

    def keep_hidden(
        self, seg: Segment, hidden: np.ndarray, layers: tuple[int, ...], results: list[ScoreResult]
    ) -> None:
        for job, h in zip(seg.jobs, hidden):
            for r, i in seg.owners[job.question]:
                results[r].hidden[i] = dict(zip(layers, h))

    def gather(self, seg: Segment, logits: np.ndarray, results: list[ScoreResult]) -> None:
        """Log-likelihoods of the segment's candidates from its logits rows; computed tokens to their requests."""
        forest = self.forest
        needs_lse = np.ones_like(forest.row_needs_lse) if any(j.split for j in seg.jobs) else forest.row_needs_lse
        lse = row_logsumexp(logits, needs_lse)
        picked = pair_logits(logits, forest.pair_rows, forest.pair_tokens)
        offsets = np.cumsum([0, *(len(j.candidates) for j in seg.jobs)]).astype(np.int32)
        lls, _ = candidate_scores(picked, forest.pair_rows, lse, forest.cand_pair_offsets, offsets)
        for j, (lo, hi) in zip(seg.jobs, zip(offsets[:-1], offsets[1:])):
            for r, i in seg.owners[j.question]:
                results[r].log_likelihoods[i][list(j.candidates)] = lls[lo:hi]
        jobs_of_nodes = node_jobs(forest, offsets)[self.nodes.kept]
        for j, count in enumerate(np.bincount(jobs_of_nodes, minlength=len(seg.jobs))):
            first_request = seg.owners[seg.jobs[j].question][0][0]
            results[first_request].computed_tokens += int(count)


def _starts(built: list[_SegmentForest]) -> list[int]:
    """Each segment's first row in the pass's packed nodes."""
    return list(np.cumsum([0, *(len(b.nodes.tokens) for b in built[:-1])]))


def node_jobs(forest, job_cand_offsets: np.ndarray) -> np.ndarray:
    """int[num_nodes]: the job that put each node into the forest (nodes are in first-insertion order, job by job).

    A job's last node is the furthest of its prompt's last node and the rows its candidates read; the leaves after
    it (last tokens nobody reads) go to the job that follows."""
    furthest = []
    for j in range(len(job_cand_offsets) - 1):
        pairs = forest.pair_rows[
            forest.cand_pair_offsets[job_cand_offsets[j]] : forest.cand_pair_offsets[job_cand_offsets[j + 1]]
        ]
        furthest.append(max(int(forest.prompt_last_nodes[j]), int(forest.rows[pairs].max(initial=-1))))
    reach = np.maximum.accumulate(np.asarray(furthest))
    return np.minimum(np.searchsorted(reach, np.arange(forest.num_nodes)), len(furthest) - 1)
