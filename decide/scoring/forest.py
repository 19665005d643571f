"""The token forest of a request, and the log-prob gather over its logits rows.

`build_forest` packs every prompt + candidate sequence into one trie (`Forest`): the nodes to run through the
model, where each sits, which rows of logits are needed and which (row, token) pairs each candidate sums.
`row_logsumexp`, `pair_logits` and `candidate_scores` turn those logits rows into per-candidate log-likelihoods
and per-question probabilities; `Forest.scores` chains them.

Everything runs natively (decide._native, decide._gather); `native=False` selects the pure-Python twin, the
test oracle, written to be obviously correct rather than fast.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from .. import _gather, _native


@dataclass(frozen=True, eq=False)
class Forest:
    """One token trie over all sequences prompt_q + candidate_k of a request, from position prefix_len on.

    Every node is one token, computed once. Nodes are in first-insertion order (prompt 0, question 0's
    candidates, prompt 1's new nodes, question 1's candidates, ...), so a parent comes before its children.
    `logits[r]` (what the model outputs at node rows[r]) scores the child tokens of that node.

    Example, prefix_len=1, prompts [9 1 2] and [9 1 3], candidates q0: [4], [4 5]; q1: [4], [6]
    (token 9 is in the cache; candidate [4] of q0 ends at node 2, which is also inside [4 5]):

        node      0  1  2  3  4  5  6       mask (j ancestor-or-self of i)
        token     1  2  4  5  3  4  6            j: 0 1 2 3 4 5 6
        parent   -1  0  1  2  0  4  4         i=0   1 . . . . . .
        position  1  2  3  4  2  3  3         i=1   1 1 . . . . .
                                               i=2   1 1 1 . . . .
             (9)─1─2─4─5      q0: [4] [4 5]    i=3   1 1 1 1 . . .
                   └─3─4      q1: [4]          i=4   1 . . . 1 . .
                     └─6      q1: [6]          i=5   1 . . . 1 1 .
                                               i=6   1 . . . 1 . 1

        rows = [1 2 4]   row_needs_lse = [0 1 0]   prompt_last_nodes = [1 4]
        pairs (row, token): c0 (0,4) | c1 (0,4) (1,5) | c2 (2,4) | c3 (2,6)
        pair_rows = [0 0 1 2 2]   pair_tokens = [4 4 5 4 6]   cand_pair_offsets = [0 1 3 4 5]
        num_nodes = 7   prompt_nodes = 3 (nodes 0 1 4)   candidate_nodes = 4

    row_needs_lse[r] is 0 when every question gathering at row r does so with all of its candidates (rows 0 and 2
    here): the row's -lse then lands once on each of that question's log-likelihoods and cancels in its softmax.
    """

    tokens: np.ndarray  # int32[N]
    parents: np.ndarray  # int32[N], -1 = child of the cached prefix
    positions: np.ndarray  # int32[N], prefix_len + depth
    rows: np.ndarray  # int32[R], ascending nodes whose logits row is needed
    row_needs_lse: np.ndarray  # uint8[R]
    pair_rows: np.ndarray  # int32[M], index into rows
    pair_tokens: np.ndarray  # int32[M]
    cand_pair_offsets: np.ndarray  # int32[C + 1]
    prompt_last_nodes: np.ndarray  # int32[Q]
    question_cand_offsets: np.ndarray  # int32[Q + 1], question q owns candidates [qco[q], qco[q + 1])
    prefix_len: int
    num_nodes: int
    prompt_nodes: int  # nodes on some prompt's path
    candidate_nodes: int  # the others: nodes only candidates reach

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                value.setflags(write=False)

    def ancestor_mask(self, start: int = 0, stop: int | None = None, *, native: bool = True) -> np.ndarray:
        """bool[stop - start, stop]: mask[i - start, j] = node j is an ancestor-or-self of node i."""
        return ancestor_mask(self.parents, start, stop, native=native)

    def scores(self, logits: np.ndarray, *, native: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(loglik float64[C], probs float64[C]) from logits float32[R, V] at self.rows."""
        lse = row_logsumexp(logits, self.row_needs_lse, native=native)
        picked = pair_logits(logits, self.pair_rows, self.pair_tokens, native=native)
        return candidate_scores(
            picked, self.pair_rows, lse, self.cand_pair_offsets, self.question_cand_offsets, native=native
        )


def build_forest(
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    prefix_len: int = 0,
    *,
    native: bool = True,
) -> Forest:
    """The forest of prompts[q] + candidates[q][k]; the first prefix_len tokens (shared, cached) are not nodes.

    Raises ValueError on an empty candidate, a question without candidates, prefix_len < 0 or > the shortest
    prompt length - 1, or prompts that do not share their first prefix_len tokens.
    """
    if len(candidates) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but candidates for {len(candidates)} questions")
    qco = _offsets([len(cs) for cs in candidates])
    if not native:
        return _build_forest_py(prompts, candidates, prefix_len, qco)
    flat = [c for cs in candidates for c in cs]
    built = _native.build_forest(*_pack(prompts), *_pack(flat), qco, prefix_len)
    names = [f.name for f in fields(Forest) if f.name != "question_cand_offsets"]
    return Forest(question_cand_offsets=qco, **{name: getattr(built, name) for name in names})


def ancestor_mask(parents: np.ndarray, start: int = 0, stop: int | None = None, *, native: bool = True) -> np.ndarray:
    """bool[stop - start, stop]: mask[i - start, j] = node j is an ancestor-or-self of node i (parents[i] < i)."""
    if native:
        return _native.ancestor_mask(parents, start, stop)
    stop = len(parents) if stop is None else stop
    mask = np.zeros((stop - start, stop), dtype=bool)
    for i in range(start, stop):
        j = i
        while j >= 0:
            mask[i - start, j] = True
            j = parents[j]
    return mask


def row_logsumexp(logits: np.ndarray, needed: np.ndarray, *, native: bool = True) -> np.ndarray:
    """float64[R]: logsumexp of logits[r] (float32[R, V]) where needed[r], else 0.

    float64 rather than float32: rounding the normalizer to float32 would cost ~1e-6 in the log-likelihoods.
    """
    if native:
        return _gather.row_logsumexp(logits, needed)
    out = np.zeros(len(logits), dtype=np.float64)
    rows = np.flatnonzero(needed)
    x = logits[rows].astype(np.float64)
    top = x.max(axis=1, keepdims=True)
    out[rows] = top[:, 0] + np.log(np.exp(x - top).sum(axis=1))
    return out


def pair_logits(
    logits: np.ndarray, pair_rows: np.ndarray, pair_tokens: np.ndarray, *, native: bool = True
) -> np.ndarray:
    """float32[M]: logits[pair_rows[j], pair_tokens[j]]."""
    if native:
        return _gather.pair_logits(logits, pair_rows, pair_tokens)
    return np.asarray(logits)[pair_rows, pair_tokens].astype(np.float32)


def candidate_scores(
    pair_logits: np.ndarray,
    pair_rows: np.ndarray,
    row_lse: np.ndarray,
    cand_pair_offsets: np.ndarray,
    question_cand_offsets: np.ndarray,
    *,
    native: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(loglik float64[C], probs float64[C]): loglik[c] = Σ pair_logit - row_lse[row] over c's pairs, probs its
    softmax within each question. A skipped lse (0) shifts a question's logliks by a constant the softmax cancels.
    """
    if native:
        return _gather.candidate_scores(pair_logits, pair_rows, row_lse, cand_pair_offsets, question_cand_offsets)
    terms = pair_logits.astype(np.float64) - row_lse[pair_rows]
    loglik = np.array([terms[a:b].sum() for a, b in itertools.pairwise(cand_pair_offsets)], dtype=np.float64)
    probs = np.empty_like(loglik)
    for a, b in itertools.pairwise(question_cand_offsets):
        e = np.exp(loglik[a:b] - loglik[a:b].max())
        probs[a:b] = e / e.sum()
    return loglik, probs


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=out[1:])
    return out


def _pack(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR form: (int32 tokens, int32 offsets[len(seqs) + 1])."""
    offsets = _offsets([len(s) for s in seqs])
    tokens = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(offsets[-1]))
    return tokens, offsets


# --- the pure-Python twin of the trie: a dict of children per node -------------------------------------------------


def _check_py(prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]], prefix_len: int) -> None:
    if not prompts:
        raise ValueError("a forest needs at least one prompt")
    if prefix_len < 0:
        raise ValueError(f"prefix_len must be >= 0, got {prefix_len}")
    shortest = min(len(p) for p in prompts)
    if prefix_len > shortest - 1:
        raise ValueError(f"prefix_len={prefix_len} must be at most the shortest prompt length - 1 ({shortest - 1})")
    for q, prompt in enumerate(prompts):
        if list(prompt[:prefix_len]) != list(prompts[0][:prefix_len]):
            raise ValueError(f"prompt {q} does not share the first prefix_len={prefix_len} tokens of prompt 0")
        if not candidates[q]:
            raise ValueError(f"question {q} has no candidates")
        if any(len(c) == 0 for c in candidates[q]):
            raise ValueError(f"question {q} has an empty candidate; every candidate needs at least one token")


def _build_forest_py(
    prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]], prefix_len: int, qco: np.ndarray
) -> Forest:
    _check_py(prompts, candidates, prefix_len)
    tokens: list[int] = []
    parents: list[int] = []
    children: dict[int, dict[int, int]] = {-1: {}}  # node -> {token: child}; -1 is the cached prefix

    def child(node: int, token: int) -> int:
        if token not in children[node]:
            children[node][token] = len(tokens)
            children[len(tokens)] = {}
            tokens.append(token)
            parents.append(node)
        return children[node][token]

    def walk(node: int, seq: Sequence[int]) -> list[int]:
        path = []
        for token in seq:
            node = child(node, token)
            path.append(node)
        return path

    on_prompt: set[int] = set()
    prompt_last: list[int] = []
    cand_pairs: list[list[tuple[int, int]]] = []  # per candidate: (node before the token, token)
    for prompt, cands in zip(prompts, candidates, strict=True):
        path = walk(-1, prompt[prefix_len:])
        on_prompt.update(path)
        prompt_last.append(path[-1])
        for cand in cands:
            before = [path[-1], *walk(path[-1], cand)[:-1]]
            cand_pairs.append(list(zip(before, cand, strict=True)))

    depth: list[int] = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    rows = sorted({node for pairs in cand_pairs for node, _ in pairs})
    row_index = {node: r for r, node in enumerate(rows)}
    needs_lse = _rows_needing_lse(cand_pairs, qco, row_index)
    i32 = np.int32
    return Forest(
        tokens=np.array(tokens, i32),
        parents=np.array(parents, i32),
        positions=np.array([prefix_len + d for d in depth], i32),
        rows=np.array(rows, i32),
        row_needs_lse=np.array([r in needs_lse for r in range(len(rows))], np.uint8),
        pair_rows=np.array([row_index[node] for pairs in cand_pairs for node, _ in pairs], i32),
        pair_tokens=np.array([token for pairs in cand_pairs for _, token in pairs], i32),
        cand_pair_offsets=_offsets([len(pairs) for pairs in cand_pairs]),
        prompt_last_nodes=np.array(prompt_last, i32),
        question_cand_offsets=qco,
        prefix_len=prefix_len,
        num_nodes=len(tokens),
        prompt_nodes=len(on_prompt),
        candidate_nodes=len(tokens) - len(on_prompt),
    )


def _rows_needing_lse(cand_pairs: list[list[tuple[int, int]]], qco: np.ndarray, row_index: dict[int, int]) -> set[int]:
    """Rows where some question gathers with only some of its candidates (else the lse cancels in its softmax)."""
    needed = set()
    for a, b in itertools.pairwise(qco):
        gathering = Counter(row_index[node] for pairs in cand_pairs[a:b] for node, _ in pairs)
        needed.update(r for r, count in gathering.items() if count < b - a)
    return needed
