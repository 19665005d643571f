"""The token forest of a request, and the log-prob gather over its logits rows.

`build_forest` packs every prompt + candidate sequence into one trie (`Forest`): the nodes to run through the
model, where each sits, which rows of logits are needed and which (row, token) pairs each candidate sums.
`row_logsumexp`, `pair_logits` and `candidate_scores` turn those logits rows into per-candidate log-likelihoods
and per-question probabilities; `Forest.scores` chains them.

Everything runs natively (decide._native, decide._gather); forest_reference.py holds the pure-Python twins,
the test oracles, written to be obviously correct rather than fast.
"""

from __future__ import annotations

import itertools
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

    def ancestor_mask(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """bool[stop - start, stop]: mask[i - start, j] = node j is an ancestor-or-self of node i."""
        return ancestor_mask(self.parents, start, stop)

    def scores(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(loglik float64[C], probs float64[C]) from logits float32[R, V] at self.rows."""
        lse = row_logsumexp(logits, self.row_needs_lse)
        picked = pair_logits(logits, self.pair_rows, self.pair_tokens)
        return candidate_scores(picked, self.pair_rows, lse, self.cand_pair_offsets, self.question_cand_offsets)


def build_forest(
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    prefix_len: int = 0,
) -> Forest:
    """The forest of prompts[q] + candidates[q][k]; the first prefix_len tokens (shared, cached) are not nodes.

    Raises ValueError on an empty candidate, a question without candidates, prefix_len < 0 or > the shortest
    prompt length - 1, or prompts that do not share their first prefix_len tokens.
    """
    if len(candidates) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but candidates for {len(candidates)} questions")
    qco = offsets([len(cs) for cs in candidates])
    flat = [c for cs in candidates for c in cs]
    built = _native.build_forest(*_pack(prompts), *_pack(flat), qco, prefix_len)
    names = [f.name for f in fields(Forest) if f.name != "question_cand_offsets"]
    return Forest(question_cand_offsets=qco, **{name: getattr(built, name) for name in names})


def ancestor_mask(parents: np.ndarray, start: int = 0, stop: int | None = None) -> np.ndarray:
    """bool[stop - start, stop]: mask[i - start, j] = node j is an ancestor-or-self of node i (parents[i] < i)."""
    return _native.ancestor_mask(parents, start, stop)


def row_logsumexp(logits: np.ndarray, needed: np.ndarray) -> np.ndarray:
    """float64[R]: logsumexp of logits[r] (float32[R, V]) where needed[r], else 0.

    float64 rather than float32: rounding the normalizer to float32 would cost ~1e-6 in the log-likelihoods.
    """
    return _gather.row_logsumexp(logits, needed)


def pair_logits(logits: np.ndarray, pair_rows: np.ndarray, pair_tokens: np.ndarray) -> np.ndarray:
    """float32[M]: logits[pair_rows[j], pair_tokens[j]]."""
    return _gather.pair_logits(logits, pair_rows, pair_tokens)


def candidate_scores(
    pair_logits: np.ndarray,
    pair_rows: np.ndarray,
    row_lse: np.ndarray,
    cand_pair_offsets: np.ndarray,
    question_cand_offsets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(loglik float64[C], probs float64[C]): loglik[c] = Σ pair_logit - row_lse[row] over c's pairs, probs its
    softmax within each question. A skipped lse (0) shifts a question's logliks by a constant the softmax cancels.
    """
    return _gather.candidate_scores(pair_logits, pair_rows, row_lse, cand_pair_offsets, question_cand_offsets)


def offsets(lengths: Sequence[int]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=out[1:])
    return out


def _pack(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """CSR form: (int32 tokens, int32 offsets[len(seqs) + 1])."""
    starts = offsets([len(s) for s in seqs])
    tokens = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int32, count=int(starts[-1]))
    return tokens, starts
