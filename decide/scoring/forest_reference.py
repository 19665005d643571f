"""The pure-Python twins of forest.py's native functions: the test oracles, obviously correct rather than fast.

Each `*_reference` function takes and returns what its namesake in forest.py does; tests compare them on
random inputs.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import numpy as np

from .forest import Forest, offsets


def ancestor_mask_reference(parents: np.ndarray, start: int = 0, stop: int | None = None) -> np.ndarray:
    stop = len(parents) if stop is None else stop
    mask = np.zeros((stop - start, stop), dtype=bool)
    for i in range(start, stop):
        j = i
        while j >= 0:
            mask[i - start, j] = True
            j = parents[j]
    return mask


def row_logsumexp_reference(logits: np.ndarray, needed: np.ndarray) -> np.ndarray:
    out = np.zeros(len(logits), dtype=np.float64)
    rows = np.flatnonzero(needed)
    x = logits[rows].astype(np.float64)
    top = x.max(axis=1, keepdims=True)
    out[rows] = top[:, 0] + np.log(np.exp(x - top).sum(axis=1))
    return out


def pair_logits_reference(logits: np.ndarray, pair_rows: np.ndarray, pair_tokens: np.ndarray) -> np.ndarray:
    return np.asarray(logits)[pair_rows, pair_tokens].astype(np.float32)


def candidate_scores_reference(
    pair_logits: np.ndarray,
    pair_rows: np.ndarray,
    row_lse: np.ndarray,
    cand_pair_offsets: np.ndarray,
    question_cand_offsets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    terms = pair_logits.astype(np.float64) - row_lse[pair_rows]
    loglik = np.array([terms[a:b].sum() for a, b in itertools.pairwise(cand_pair_offsets)], dtype=np.float64)
    probs = np.empty_like(loglik)
    for a, b in itertools.pairwise(question_cand_offsets):
        e = np.exp(loglik[a:b] - loglik[a:b].max())
        probs[a:b] = e / e.sum()
    return loglik, probs


def scores_reference(forest: Forest, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`forest.scores(logits)` through the twins."""
    lse = row_logsumexp_reference(logits, forest.row_needs_lse)
    picked = pair_logits_reference(logits, forest.pair_rows, forest.pair_tokens)
    return candidate_scores_reference(
        picked, forest.pair_rows, lse, forest.cand_pair_offsets, forest.question_cand_offsets
    )


# --- the trie: a dict of children per node -------------------------------------------------------------------------


def _check(prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]], prefix_len: int) -> None:
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


def build_forest_reference(
    prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]], prefix_len: int = 0
) -> Forest:
    if len(candidates) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but candidates for {len(candidates)} questions")
    qco = offsets([len(cs) for cs in candidates])
    _check(prompts, candidates, prefix_len)
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
        cand_pair_offsets=offsets([len(pairs) for pairs in cand_pairs]),
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
