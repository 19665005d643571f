"""Tree-masked attention inside stock mlx-lm models, without forking model files.

Two hooks make a packed forest of tokens look like one sequence to the model:

- each attention's `rope` is wrapped by `PositionalRoPE`: an int offset behaves exactly as
  before, an int array gives every token its own position (its depth in the forest);
- `ForestCache` stands in for the layer's KV cache: its `offset` is that position array, it
  prepends the cached prefix's K/V without touching them, and `make_mask` returns the
  ancestor-or-self mask, so node i sees the prefix and its own ancestors only.

Installing is checked numerically on the real model (`self_test`): a model whose attention
does not route through these hooks is left alone and scored by the prompt-once path.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import mlx.nn as nn
import numpy as np

from ..runtime import mx
from . import fast_kernels

log = logging.getLogger("decide.scoring")


class PositionalRoPE(nn.Module):
    """A model's own RoPE, applied per token when given an array of positions."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def __call__(self, x: mx.array, offset=0) -> mx.array:
        if fast_kernels.is_enabled() and (out := fast_kernels.rope_tables.rotate(self.inner, x, offset)) is not None:
            return out
        if isinstance(offset, mx.array) and offset.ndim == 1:
            # Lay the L tokens along the batch axis: RoPE takes one offset per batch row.
            # (B=1, H, L, D) -> (L, H, 1, D) -> rotate -> back.
            return self.inner(x.transpose(2, 1, 0, 3), offset=offset).transpose(2, 1, 0, 3)
        return self.inner(x, offset=offset)


@dataclass(frozen=True)
class Block:
    """One segment's columns of the attended K/V: its cached prefix, then its `nodes` forest nodes."""

    prefix: list[tuple[mx.array, mx.array]] | None  # per layer, None when the segment has no prefix
    prefix_len: int
    nodes: int

    @property
    def width(self) -> int:
        return self.prefix_len + self.nodes


class ForestCache:
    """A layer's view of the blocks' columns: per block, its cached prefix K/V, then its nodes' new K/V.

    Its `offset` is the per-node position array; `make_mask` returns the block-diagonal ancestor mask."""

    def __init__(self, layer: int, blocks: list[Block], positions: mx.array, mask: mx.array, span_biases) -> None:
        self.layer = layer
        self.blocks = blocks
        self.positions = positions
        self.mask = mask
        # Per block with nodes, for fast_kernels' block-diagonal attention: (rows, columns), the mask
        # there as 0 / -inf, and how many leading columns all its rows see (its cached prefix).
        self.spans = block_spans(blocks)
        self.span_biases = span_biases
        self.span_shared = [b.prefix_len for b in blocks if b.nodes]

    @property
    def offset(self) -> mx.array:
        return self.positions

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
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


def attention_modules(layers: list) -> list:
    return [getattr(layer, "self_attn", None) or getattr(layer, "attention", None) for layer in layers]


def install(layers: list) -> bool:
    """Wrap every attention's rope (idempotent). False when some layer has no `rope` to wrap."""
    attns = attention_modules(layers)
    if any(a is None or not isinstance(getattr(a, "rope", None), nn.Module) for a in attns):
        return False
    for a in attns:
        if not isinstance(a.rope, PositionalRoPE):
            a.rope = PositionalRoPE(a.rope)
    return True


def uninstall(layers: list) -> None:
    for a in attention_modules(layers):
        if a is not None and isinstance(getattr(a, "rope", None), PositionalRoPE):
            a.rope = a.rope.inner


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


def block_spans(blocks: list[Block]) -> list[tuple[int, int, int, int]]:
    """Per block with nodes: (first row, end row, first column, end column) of its part of the mask."""
    spans, row, col = [], 0, 0
    for b in blocks:
        if b.nodes:
            spans.append((row, row + b.nodes, col, col + b.prefix_len + b.nodes))
        row, col = row + b.nodes, col + b.width
    return spans


def forest_hidden(
    body, n_layers: int, tokens: np.ndarray, positions: np.ndarray, blocks: list[Block], mask
) -> mx.array:
    """Final hidden states [N, D] of the packed forest nodes of `blocks`, each on top of its own prefix K/V."""
    pos = mx.array(positions.astype(np.int32))
    bias = fast_kernels.additive_bias(mask)
    span_biases = [bias[r0:r1, c0:c1] for r0, r1, c0, c1 in block_spans(blocks)]
    caches = [ForestCache(i, blocks, pos, mask, span_biases) for i in range(n_layers)]
    return body(mx.array(tokens.astype(np.int32))[None], caches)[0]


def self_test(parts, model, fast: bool = False) -> bool:
    """Does a two-branch forest give the same hidden states as plain forwards of each branch?

    With `fast`, the forest runs on fast_kernels (the plain forwards always run stock)."""
    rng = np.random.default_rng(0)
    vocab = int(parts.head(mx.zeros((1, parts_hidden_size(parts, model)))).shape[-1])
    stem = rng.integers(0, vocab, 5).tolist()
    a, b = rng.integers(0, vocab, 3).tolist(), rng.integers(0, vocab, 2).tolist()
    tokens = np.array(stem + a + b)
    parents = list(range(-1, 4)) + [4, 5, 6] + [4, 8]
    positions = np.array([0, 1, 2, 3, 4, 5, 6, 7, 5, 6])
    anc = np.zeros((10, 10), dtype=np.bool_)
    for i in range(10):
        j = i
        while j >= 0:
            anc[i, j] = True
            j = parents[j]
    with fast_kernels.enabled() if fast else contextlib.nullcontext():
        blocks = [Block(None, 0, len(tokens))]
        got = forest_hidden(parts.body, len(parts.layers), tokens, positions, blocks, forest_mask(blocks, [anc]))
    want_a = parts.body(mx.array(stem + a)[None])[0]
    want_b = parts.body(mx.array(stem + b)[None])[0]
    want = mx.concatenate([want_a, want_b[5:]], axis=0)
    err = float(mx.abs(got.astype(mx.float32) - want.astype(mx.float32)).max())
    scale = float(mx.abs(want.astype(mx.float32)).max()) or 1.0
    ok = err <= 1e-3 * scale
    if not ok:
        kernels = "fast" if fast else "stock"
        log.info("tree attention self-test failed with %s kernels (max error %.3g of %.3g)", kernels, err, scale)
    return ok


def parts_hidden_size(parts, model) -> int:
    args = getattr(model, "args", None)
    size = getattr(args, "hidden_size", None)
    if size is None:
        raise TypeError("model args have no hidden_size")
    return int(size)
