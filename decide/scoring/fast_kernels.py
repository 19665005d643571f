"""Faster attention and SiLU for the trie engine's forwards, swapped into mlx-lm model modules.

On a CPU, MLX evaluates `exp` (and so softmax and sigmoid) one libm call per element: ~20-60 M/s,
against billions per second for a multiply, and runs attention as separate passes over the whole
score matrix. `fast_exp` is Cody-Waite range reduction, a degree-7 Taylor polynomial and an
exponent built from integer bits, fused by `mx.compile` (relative error < 2e-7). Attention goes to
the native kernel of csrc/kernels.cpp (tiles of query rows, BLAS products, the same exp,
vectorized) where an optimized BLAS is loaded, else to `mlx_attention`; likewise SiLU.

`install(model)` replaces the `scaled_dot_product_attention` and `swiglu` names a model's module
imported from mlx-lm with wrappers that use these kernels only inside `enabled()`; everywhere else
(the reference scorer, other callers of the model) the stock functions run unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
from collections.abc import Iterator
from functools import partial

import mlx.nn as nn
import numpy as np

from .. import _native, bf16_kernels
from ..runtime import device, mx

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125  # ln 2 split so that n * _LN2_HI is exact in float32
_LN2_LO = 1.428606765330187e-06
_ROUND = 12582912.0  # 1.5 * 2**23: adding it rounds to an integer kept in the low mantissa bits
_EXPONENT_BITS = 0x4B400000 - 127  # bits of _ROUND, minus the float32 exponent bias

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar("decide_fast_kernels", default=False)
# speed hook: attention's products in bfloat16 (decide.bf16_kernels) for a bfloat16 model's passes
_bf16_attention: contextvars.ContextVar[bool] = contextvars.ContextVar("decide_bf16_attention", default=False)


@partial(mx.compile, shapeless=True)
def _exp_parts(x: mx.array) -> tuple[mx.array, mx.array]:
    """exp(x) = p · 2ⁿ: returns p and n + _ROUND (n sits in the float's low mantissa bits)."""
    x = mx.clip(x, -87.0, 88.0)
    y = x * _LOG2E + _ROUND
    n = y - _ROUND
    f = x - n * _LN2_HI - n * _LN2_LO
    p = 1.0 + f * (1.0 + f * (1 / 2 + f * (1 / 6 + f * (1 / 24 + f * (1 / 120 + f * (1 / 720 + f * (1 / 5040)))))))
    return p, y


def _times_two_to_n(p: mx.array, y: mx.array) -> mx.array:
    # A bit cast cannot be traced shapeless, so it stays outside the compiled graphs (which would
    # otherwise be kept once per request shape, growing memory without bound).
    return p * mx.left_shift(y.view(mx.int32) - _EXPONENT_BITS, 23).view(mx.float32)


def fast_exp(x: mx.array) -> mx.array:
    """exp(x) for float32, exact to ~2 ulp on [-87, 88] (clamped outside: ~1e-38 below, ~1.7e38 above)."""
    return _times_two_to_n(*_exp_parts(x))


def silu_product(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) · up, SwiGLU's product: native on a CPU, else `mlx_silu_product`, its reference."""
    if _on_cpu() and gate.shape == up.shape:
        mx.eval(gate, up)
        return mx.array(_native.silu_product(*(np.ascontiguousarray(a) for a in (gate, up))))
    return mlx_silu_product(gate, up)


def mlx_silu_product(gate: mx.array, up: mx.array) -> mx.array:
    return _silu_product(gate, up, fast_exp(-gate))


@partial(mx.compile, shapeless=True)
def _silu_product(gate: mx.array, x: mx.array, exp_minus_gate: mx.array) -> mx.array:
    return gate * x / (1.0 + exp_minus_gate)


ROWS_BYTES = 4 << 20  # score rows evaluated at a time: a working set that stays in the CPU's cache


def attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array | int, shared: int = 0
) -> mx.array:
    """softmax(q kᵀ · scale + mask) v, grouped-query aware.

    `mask`: a float32[L, S] bias of 0 / -inf, or an int c for a causal mask (query i sees keys j <= i + c).
    `shared`: with a bias, keys [0, shared) are seen by every query (a forest's cached prefix); the native
    kernel then gives each query a result that depends only on the keys it sees.
    On a CPU with an optimized BLAS one sequence goes to the native kernel (csrc/kernels.cpp);
    otherwise `mlx_attention` runs, its reference."""
    if queries.shape[0] == 1 and _native_fits():
        return _native_attention(queries, keys, values, scale, mask, shared)
    return mlx_attention(queries, keys, values, scale, mask)


@functools.cache
def _on_cpu() -> bool:
    return device() == "cpu"


@functools.cache
def _native_fits() -> bool:
    return _on_cpu() and _native.attention_available()


def _native_attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask, shared: int) -> mx.array:
    bias = None if isinstance(mask, int) else mask
    mx.eval(queries, keys, values, *([] if bias is None else [bias]))
    q, k, v = (_rows_contiguous(np.asarray(a)[0]) for a in (queries, keys, values))  # views, no copy
    bias_np = None if bias is None else _rows_contiguous(np.asarray(bias))
    kernel = bf16_kernels.attention if _bf16_attention.get() else _native.attention  # speed hook
    out = kernel(q, k, v, scale, bias_np, 0 if bias is not None else mask, shared)
    return mx.array(out)[None]


def _rows_contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.shape[-1] == 1 or a.strides[-1] == a.itemsize else np.ascontiguousarray(a)


def mlx_attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array | int) -> mx.array:
    """`attention` in MLX ops. Long spans are done a block of query rows at a time, each evaluated on
    its own: the softmax is a chain of elementwise passes over the scores, 3x faster in cache."""
    b, h, length, d = queries.shape
    bias = causal_bias(length, keys.shape[2], mask) if isinstance(mask, int) else mask
    rows = max(16, ROWS_BYTES // (4 * b * h * keys.shape[2]))
    if length <= rows:
        return _attention(queries, keys, values, scale, bias)
    outs = []
    for start in range(0, length, rows):
        outs.append(_attention(queries[:, :, start : start + rows], keys, values, scale, bias[start : start + rows]))
        mx.eval(outs[-1])
    return mx.concatenate(outs, axis=2)


def _attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float, bias: mx.array) -> mx.array:
    b, h, length, d = queries.shape
    kv_heads, span = keys.shape[1], keys.shape[2]
    groups = h // kv_heads
    q = (queries * scale).reshape(b, kv_heads, groups * length, d)
    scores = (q @ keys.swapaxes(-1, -2)).reshape(b, kv_heads, groups, length, span) + bias
    weights = fast_exp(scores - scores.max(axis=-1, keepdims=True))
    total = weights.sum(axis=-1, keepdims=True).reshape(b, kv_heads, groups * length, 1)
    out = (weights.reshape(b, kv_heads, groups * length, span) @ values) / total
    return out.reshape(b, h, length, d)


class RopeTables:
    """cos/sin tables of a model's RoPE for a pass's positions, shared by all its layers and heads.

    A RoPE is linear: rotating a vector with ones where each pair's first element is and zeros
    elsewhere yields (cos, sin) of every pair. So the tables come from the model's own rope, with
    its own angles; only plain `nn.RoPE` is trusted to be a pure per-pair rotation. MLX's CPU
    rope computes cos and sin per element with libm; here 30 layers x 12 heads share one table."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._tables: dict[tuple, tuple[object, mx.array, mx.array]] = {}

    def rotate(self, rope, x: mx.array, offset) -> mx.array | None:
        """rope(x, offset) through the tables; None when the rope or the call does not fit."""
        if type(rope) is not nn.RoPE or x.ndim != 4 or x.dtype != mx.float32 or rope.dims % 2:
            return None
        per_token = isinstance(offset, mx.array)
        if per_token and (offset.ndim != 1 or offset.shape[0] != x.shape[2]):
            return None
        cos, sin = self._lookup(rope, offset, x.shape[2], per_token)
        half = rope.dims // 2
        if rope.traditional:
            pairs = x[..., : rope.dims].reshape(*x.shape[:-1], half, 2)
            first, second = _rotate_pair(pairs[..., 0], pairs[..., 1], cos, sin)
            rotated = mx.stack([first, second], axis=-1).reshape(*x.shape[:-1], rope.dims)
        else:
            rotated = mx.concatenate(_rotate_pair(x[..., :half], x[..., half : rope.dims], cos, sin), axis=-1)
        return rotated if rope.dims == x.shape[-1] else mx.concatenate([rotated, x[..., rope.dims :]], axis=-1)

    def _lookup(self, rope, offset, length: int, per_token: bool) -> tuple[mx.array, mx.array]:
        where = ("tokens", id(offset)) if per_token else ("range", offset, length)
        key = (rope.dims, rope.traditional, rope.base, rope.scale, *where)
        hit = self._tables.get(key)
        if hit is not None and (not per_token or hit[0] is offset):
            return hit[1], hit[2]
        half = rope.dims // 2
        unit = mx.zeros((rope.dims,), mx.float32)
        unit = unit.at[0::2].add(1.0) if rope.traditional else unit.at[:half].add(1.0)
        if per_token:  # the tokens along the batch axis, one offset each (as PositionalRoPE does)
            rotated = rope(mx.broadcast_to(unit, (length, 1, 1, rope.dims)), offset=offset).reshape(length, -1)
        else:
            rotated = rope(mx.broadcast_to(unit, (1, 1, length, rope.dims)), offset=offset).reshape(length, -1)
        if rope.traditional:
            cos, sin = rotated[:, 0::2], rotated[:, 1::2]
        else:
            cos, sin = rotated[:, :half], rotated[:, half:]
        cos, sin = mx.contiguous(cos), mx.contiguous(sin)
        mx.eval(cos, sin)
        if len(self._tables) >= self.size:
            self._tables.pop(next(iter(self._tables)))
        self._tables[key] = (offset, cos, sin)  # holds the offset array, so its id stays its own
        return cos, sin


@partial(mx.compile, shapeless=True)
def _rotate_pair(first: mx.array, second: mx.array, cos: mx.array, sin: mx.array) -> tuple[mx.array, mx.array]:
    return first * cos - second * sin, first * sin + second * cos


rope_tables = RopeTables()


def additive_bias(mask: mx.array) -> mx.array:
    """bool[L, S] (True = may attend) → float32[L, S] of 0 / -inf."""
    return mx.where(mask, mx.array(0.0, mx.float32), mx.array(-mx.inf, mx.float32))


def causal_bias(length: int, span: int, offset: int | None = None) -> mx.array:
    """Query i sees keys j <= i + offset (default span - length: the queries are the last `length` positions)."""
    offset = span - length if offset is None else offset
    rows = mx.arange(length)[:, None] + offset
    return additive_bias(mx.arange(span)[None, :] <= rows)


def is_enabled() -> bool:
    return _enabled.get()


@contextlib.contextmanager
def enabled(bf16_attention: bool = False) -> Iterator[None]:
    token, bf16_token = _enabled.set(True), _bf16_attention.set(bf16_attention)  # speed hook: bf16_attention
    try:
        yield
    finally:
        _enabled.reset(token)
        _bf16_attention.reset(bf16_token)


def _mask_for(mask, length: int, span: int, cache) -> mx.array | int | None:
    """`attention`'s mask for an mlx-lm mask argument; None when the fast path does not apply."""
    if mask is None:
        return span - 1 if length == 1 else None
    if isinstance(mask, str):
        return span - length if mask == "causal" else None
    if mask.dtype == mx.bool_:
        return additive_bias(mask)
    return None


def _fast_sdpa(stock):
    def one(queries, keys, values, cache, scale, mask, sinks, span_mask=None, shared=0):
        if _enabled.get() and sinks is None and not hasattr(cache, "bits") and queries.dtype == mx.float32:
            fast_mask = span_mask if span_mask is not None else _mask_for(mask, queries.shape[2], keys.shape[2], cache)
            if fast_mask is not None:
                return attention(queries, keys, values, scale, fast_mask, shared)
        return stock(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)

    def scaled_dot_product_attention(queries, keys, values, cache, scale, mask, sinks=None):
        spans = getattr(cache, "spans", None)
        if spans is None or sinks is not None:
            return one(queries, keys, values, cache, scale, mask, sinks)
        # A block-diagonal forest (tree_attention.ForestCache): each span attends alone, a block's cached prefix
        # shared by all its rows, so merging blocks into one pass changes no bit.
        outs = [
            one(q, k, v, None, scale, mask[s.r0 : s.r1, s.c0 : s.c1], None, span_mask, s.shared)
            for s, span_mask in zip(spans, cache.span_masks)
            for q, k, v in [(queries[:, :, s.r0 : s.r1], keys[:, :, s.c0 : s.c1], values[:, :, s.c0 : s.c1])]
        ]
        return outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=2)

    scaled_dot_product_attention.stock = stock
    return scaled_dot_product_attention


def _fast_swiglu(stock):
    def swiglu(gate, x):
        if _enabled.get() and gate.dtype == mx.float32:
            return silu_product(gate, x)
        return stock(gate, x)

    swiglu.stock = stock
    return swiglu


_WRAPPERS = {"scaled_dot_product_attention": _fast_sdpa, "swiglu": _fast_swiglu}


def install(model) -> list[str]:
    """Swap the kernels into the model's mlx-lm module (idempotent); returns the names swapped."""
    module = sys.modules.get(type(model).__module__)
    swapped = []
    for name, wrap in _WRAPPERS.items():
        current = getattr(module, name, None)
        if current is None or not callable(current):
            continue
        if not hasattr(current, "stock"):
            setattr(module, name, wrap(current))
        swapped.append(name)
    return swapped
