"""A forest pass: packed forest nodes through a stock mlx-lm model as if they were one sequence.

The per-layer cache object a pass hands the model is where it steers the model without forking its
code (hooks.py reads it):

- `ForestCache.offset` is the array of per-node positions (a node's depth in the forest), which the
  rope hook applies per token; `update_and_fetch` prepends each block's cached prefix K/V without
  touching them; `make_mask` returns the block-diagonal ancestor-or-self mask, so node i sees its
  block's prefix and its own ancestors only; `spans` split that mask into the pieces the attention
  hook runs one at a time; `backend` names the kernels; `tap_rows` (on the layers a pass taps) are
  the rows whose output the layer hook keeps in `tapped`;
- `CausalCache` is a plain KVCache seen the same way for a causal run (a prompt prefix in chunks).

Only forest and causal passes supply these caches: every other call of the model (the reference
scorer, prompt-once, generation) gets mlx-lm's own caches and runs stock code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from mlx_lm.models.cache import KVCache

from ...runtime import mx
from .backends import Backend
from .hooks import Positions
from .kernels import additive_bias


@dataclass(frozen=True)
class Block:
    """One segment's columns of the attended K/V: its cached prefix, then its `nodes` forest nodes.

    The first `chain` nodes continue the prefix (its uncached tail, computed in this pass): a causal run
    that every later node of the block sees whole, as it sees the cached prefix."""

    prefix: list[tuple[mx.array, mx.array]] | None  # per layer, None when the segment has no cached prefix
    prefix_len: int
    nodes: int
    chain: int = 0

    @property
    def width(self) -> int:
        return self.prefix_len + self.nodes


class Span(NamedTuple):
    """Rows [r0, r1) of a pass attending to columns [c0, c1): causally (row r0 sees the columns up to c0 +
    `causal`), or under the tree mask with the first `shared` columns seen by every row."""

    r0: int
    r1: int
    c0: int
    c1: int
    causal: int | None
    shared: int


class ForestCache:
    """A layer's view of the blocks' columns: per block, its cached prefix K/V, then its nodes' new K/V.

    `fresh` keeps the pass's new (K, V), from which a block's chain is stored as a prefix."""

    def __init__(self, layer: int, blocks: list[Block], positions: Positions, mask: mx.array, spans, span_masks,
                 backend: Backend) -> None:  # fmt: skip
        self.layer = layer
        self.blocks = blocks
        self.positions = positions
        self.mask = mask
        self.spans = spans
        self.span_masks = span_masks  # per span: its causal offset, or its 0 / -inf bias
        self.backend = backend
        self.fresh: tuple[mx.array, mx.array] | None = None
        self.tap_rows: mx.array | None = None
        self.tapped: mx.array | None = None

    @property
    def offset(self) -> Positions:
        return self.positions

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.fresh = (keys, values)
        if len(self.blocks) == 1 and self.blocks[0].prefix is None:
            return keys, values
        ks, vs, start = [], [], 0
        for b in self.blocks:
            if b.prefix is not None:
                pk, pv = b.prefix[self.layer]
                ks.append(pk)
                vs.append(pv)
            ks.append(keys[:, :, start : start + b.nodes])
            vs.append(values[:, :, start : start + b.nodes])
            start += b.nodes
        return mx.concatenate(ks, axis=2), mx.concatenate(vs, axis=2)

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> mx.array:
        return self.mask


class CausalCache:
    """A KVCache under a causal run of tokens: per-token positions for the rope hook, the backend for the others."""

    def __init__(self, kv: KVCache, backend: Backend) -> None:
        self.kv = kv
        self.backend = backend
        self.positions = Positions(mx.arange(0, dtype=mx.int32), backend.rope)  # set per call by causal_forward

    @property
    def offset(self) -> Positions:
        return self.positions

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        return self.kv.update_and_fetch(keys, values)

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        return self.kv.make_mask(N, return_array=return_array, window_size=window_size)


def forest_mask(blocks: list[Block], ancestors: list[np.ndarray]) -> mx.array:
    """bool[N, Σ width]: a block's nodes see its prefix and their own ancestors-or-self, nothing of other blocks."""
    n = sum(b.nodes for b in blocks)
    full = np.zeros((n, sum(b.width for b in blocks)), dtype=np.bool_)
    row = col = 0
    for b, anc in zip(blocks, ancestors, strict=True):
        full[row : row + b.nodes, col : col + b.prefix_len] = True
        full[row : row + b.nodes, col + b.prefix_len : col + b.prefix_len + b.nodes] = anc
        row, col = row + b.nodes, col + b.width
    return mx.array(full)


def block_spans(blocks: list[Block]) -> list[Span]:
    """Per block with nodes: its chain's rows (causal), then its other rows (tree mask, prefix and chain shared)."""
    spans, row, col = [], 0, 0
    for b in blocks:
        if b.chain:
            spans.append(Span(row, row + b.chain, col, col + b.prefix_len + b.chain, b.prefix_len, 0))
        if b.nodes > b.chain:
            spans.append(Span(row + b.chain, row + b.nodes, col, col + b.width, None, b.prefix_len + b.chain))
        row, col = row + b.nodes, col + b.width
    return spans


@dataclass(frozen=True)
class ForestPass:
    hidden: mx.array  # final hidden states [N, D] of the pass's nodes
    caches: list[ForestCache]
    taps: dict[int, mx.array]  # layer number (1-based) -> its output [len(tap_rows), D] at the tapped rows

    def chain_kv(self, index: int) -> list[tuple[mx.array, mx.array]]:
        """Per layer, the new (K, V) of block `index`'s chain."""
        blocks = self.caches[0].blocks
        start = sum(b.nodes for b in blocks[:index])
        stop = start + blocks[index].chain
        return [(c.fresh[0][:, :, start:stop], c.fresh[1][:, :, start:stop]) for c in self.caches]


def forest_forward(
    body,
    n_layers: int,
    tokens: np.ndarray,
    positions: np.ndarray,
    blocks: list[Block],
    mask,
    backend: Backend,
    tap_layers: Sequence[int] = (),
    tap_rows: np.ndarray | None = None,
) -> ForestPass:
    """The packed forest nodes of `blocks` through the model, each block on top of its own prefix K/V;
    the outputs of `tap_layers` (1-based layer numbers) at `tap_rows` are kept too."""
    pos = Positions(mx.array(positions.astype(np.int32)), backend.rope)
    spans = block_spans(blocks)
    span_masks = [s.causal if s.causal is not None else additive_bias(mask[s.r0 : s.r1, s.c0 : s.c1]) for s in spans]
    caches = [ForestCache(i, blocks, pos, mask, spans, span_masks, backend) for i in range(n_layers)]
    if tap_rows is not None:
        rows = mx.array(tap_rows.astype(np.int32))
        for layer in tap_layers:
            caches[layer - 1].tap_rows = rows
    hidden = body(mx.array(tokens.astype(np.int32))[None], caches)[0]
    return ForestPass(hidden, caches, {layer: caches[layer - 1].tapped for layer in tap_layers})


def causal_forward(body, caches: list[CausalCache], tokens: Sequence[int]) -> mx.array:
    """`tokens` through the model, causally, on top of the K/V `caches` hold (which they then hold too)."""
    start = caches[0].kv.offset
    positions = Positions(mx.arange(start, start + len(tokens), dtype=mx.int32), caches[0].backend.rope)
    for c in caches:
        c.positions = positions  # one array for every layer: the rope tables are keyed by it
    return body(mx.array(tokens, dtype=mx.int32)[None], caches)
