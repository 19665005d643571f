"""The kernels a backend can serve a forest pass with: pure functions of arrays, no device checks.

Two families compute the same things:
- `stock_*`: MLX's own ops (`mx.fast.scaled_dot_product_attention`, `nn.silu`, the model's rope), the
  reference, and what runs on Metal and CUDA;
- the CPU kernels: on a CPU, MLX evaluates `exp` (and so softmax and sigmoid) one libm call per
  element, far slower than a multiply, and runs attention as separate passes over the whole score
  matrix. `native_attention` and `native_silu_product` run csrc/kernels.cpp (tiles of query rows,
  BLAS products, a vectorized exp; `bf16_attention` makes the products bf16 GEMMs); `mlx_attention` and `mlx_silu_product` are their MLX twins, built
  on `fast_exp` (Cody-Waite range reduction, a degree-7 Taylor polynomial and an exponent built from
  integer bits, fused by `mx.compile`; relative error < 2e-7); `RopeTables` rotates by shared cos/sin
  tables, natively.

Every attention kernel takes `mask`: a float32[L, S] bias of 0 / -inf, or an int c for a causal mask
(query i sees keys j <= i + c); and `shared`: with a bias, keys [0, shared) are seen by every query.
"""

from __future__ import annotations

from functools import partial

import mlx.nn as nn
import numpy as np

from ... import _native, bf16_kernels
from ...runtime import mx

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125  # ln 2 split so that n * _LN2_HI is exact in float32
_LN2_LO = 1.428606765330187e-06
_ROUND = 12582912.0  # 1.5 * 2**23: adding it rounds to an integer kept in the low mantissa bits
_EXPONENT_BITS = 0x4B400000 - 127  # bits of _ROUND, minus the float32 exponent bias

ROWS_BYTES = 4 << 20  # score rows evaluated at a time: a working set that stays in the CPU's cache


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


# --- SwiGLU's product: silu(gate) · up ------------------------------------------------------------------------------


def stock_silu_product(gate: mx.array, up: mx.array) -> mx.array:
    return nn.silu(gate) * up


def native_silu_product(gate: mx.array, up: mx.array) -> mx.array:
    if gate.shape != up.shape or gate.dtype != mx.float32:
        return mlx_silu_product(gate, up)
    mx.eval(gate, up)
    return mx.array(_native.silu_product(*(np.ascontiguousarray(a) for a in (gate, up))))


def onednn_mlp(mlp: nn.Module, y: mx.array) -> mx.array:
    """down(silu(gate(y)) · up(y)) for an MLP of decide.bf16 linear layers, on numpy buffers from the
    input to the output: MLX would copy each [rows, intermediate] product in and out of its arrays."""
    gemms = [getattr(getattr(mlp, name), "gemm", None) for name in ("gate_proj", "up_proj", "down_proj")]
    if any(g is None for g in gemms) or y.dtype != mx.float32:
        return mlp.down_proj(native_silu_product(mlp.gate_proj(y), mlp.up_proj(y)))
    gate, up, down = gemms
    mx.eval(y)
    x = np.asarray(y)
    return mx.array(down(_native.silu_product(gate(x), up(x))))


def mlx_silu_product(gate: mx.array, up: mx.array) -> mx.array:
    return _silu_product(gate, up, fast_exp(-gate))


@partial(mx.compile, shapeless=True)
def _silu_product(gate: mx.array, x: mx.array, exp_minus_gate: mx.array) -> mx.array:
    return gate * x / (1.0 + exp_minus_gate)


# --- attention: softmax(q kᵀ · scale + mask) v, grouped-query aware ------------------------------------------------


def stock_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array | int, shared: int = 0
) -> mx.array:
    bias = causal_bias(queries.shape[2], keys.shape[2], mask) if isinstance(mask, int) else mask
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=bias.astype(queries.dtype))


def native_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array | int, shared: int = 0
) -> mx.array:
    """One float32 sequence through csrc/kernels.cpp (which needs the BLAS decide.runtime loaded); with a bias,
    a query's result depends only on the keys it sees. Batches and other dtypes go to `mlx_attention`."""
    return _one_sequence(_native.attention, queries, keys, values, scale, mask, shared)


def bf16_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array | int, shared: int = 0
) -> mx.array:
    """`native_attention` with its two products (q·kᵀ, p·v) as bf16 GEMMs through oneDNN, the softmax in float32."""
    return _one_sequence(bf16_kernels.attention, queries, keys, values, scale, mask, shared)


def _one_sequence(kernel, queries, keys, values, scale: float, mask, shared: int) -> mx.array:
    if queries.shape[0] != 1 or queries.dtype != mx.float32:
        return mlx_attention(queries, keys, values, scale, mask)
    bias = None if isinstance(mask, int) else mask
    mx.eval(queries, keys, values, *([] if bias is None else [bias]))
    q, k, v = (_rows_contiguous(np.asarray(a)[0]) for a in (queries, keys, values))  # views, no copy
    bias_np = None if bias is None else _rows_contiguous(np.asarray(bias))
    out = kernel(q, k, v, scale, bias_np, 0 if bias is not None else mask, shared)
    return mx.array(out)[None]


def _rows_contiguous(a: np.ndarray) -> np.ndarray:
    return a if a.shape[-1] == 1 or a.strides[-1] == a.itemsize else np.ascontiguousarray(a)


def mlx_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array | int, shared: int = 0
) -> mx.array:
    """Attention in MLX ops on `fast_exp`. Long spans are done a block of query rows at a time, each evaluated
    on its own: the softmax is a chain of elementwise passes over the scores, fastest while they stay in cache."""
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


def additive_bias(mask: mx.array) -> mx.array:
    """bool[L, S] (True = may attend) → float32[L, S] of 0 / -inf."""
    return mx.where(mask, mx.array(0.0, mx.float32), mx.array(-mx.inf, mx.float32))


def causal_bias(length: int, span: int, offset: int | None = None) -> mx.array:
    """Query i sees keys j <= i + offset (default span - length: the queries are the last `length` positions)."""
    offset = span - length if offset is None else offset
    rows = mx.arange(length)[:, None] + offset
    return additive_bias(mx.arange(span)[None, :] <= rows)


# --- RoPE at per-token positions ------------------------------------------------------------------------------------


def stock_rope(rope: nn.Module, x: mx.array, positions: mx.array) -> mx.array:
    """The model's own rope with one position per token: the L tokens laid along the batch axis, since
    RoPE takes one offset per batch row. (B=1, H, L, D) -> (L, H, 1, D) -> rotate -> back."""
    return rope(x.transpose(2, 1, 0, 3), offset=positions).transpose(2, 1, 0, 3)


class RopeTables:
    """cos/sin tables of a model's RoPE for a pass's positions, shared by all its layers and heads.

    A RoPE is linear: rotating a vector with ones where each pair's first element is and zeros
    elsewhere yields (cos, sin) of every pair. So the tables come from the model's own rope, with
    its own angles; only plain `nn.RoPE` is trusted to be a pure per-pair rotation. MLX's CPU
    rope computes cos and sin per element with libm; here every layer and head shares one table, and
    the rotation is one native pass (csrc/kernels.cpp) from the projection's strided output to a
    contiguous copy (in MLX ops: slices, products and a concatenation, 2.6x the time on choice40).
    A pass's positions are one array shared by its layers, so its identity keys the table."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._tables: dict[tuple, tuple[mx.array, np.ndarray, np.ndarray]] = {}

    def __call__(self, rope: nn.Module, x: mx.array, positions: mx.array) -> mx.array:
        """rope(x) at `positions` (int[L], one per token of x [B, H, L, D]) through the tables."""
        if type(rope) is not nn.RoPE or x.ndim != 4 or x.dtype != mx.float32 or rope.dims % 2:
            return stock_rope(rope, x, positions)
        cos, sin = self._lookup(rope, positions)
        mx.eval(x)
        # Per batch row, a view of the projection's output (no copy) in, a contiguous copy out.
        rotated = [_native.rope(_rows_contiguous(a), cos, sin, rope.dims, rope.traditional) for a in np.asarray(x)]
        return mx.array(rotated[0][None] if len(rotated) == 1 else np.stack(rotated))

    def _lookup(self, rope: nn.RoPE, positions: mx.array) -> tuple[np.ndarray, np.ndarray]:
        key = (rope.dims, rope.traditional, rope.base, rope.scale, id(positions))
        hit = self._tables.get(key)
        if hit is not None and hit[0] is positions:
            return hit[1], hit[2]
        half = rope.dims // 2
        unit = mx.zeros((rope.dims,), mx.float32)
        unit = unit.at[0::2].add(1.0) if rope.traditional else unit.at[:half].add(1.0)
        length = positions.shape[0]
        rotated = stock_rope(rope, mx.broadcast_to(unit, (1, 1, length, rope.dims)), positions).reshape(length, -1)
        if rope.traditional:
            cos, sin = rotated[:, 0::2], rotated[:, 1::2]
        else:
            cos, sin = rotated[:, :half], rotated[:, half:]
        cos, sin = mx.contiguous(cos), mx.contiguous(sin)
        mx.eval(cos, sin)
        cos, sin = np.asarray(cos), np.asarray(sin)  # what the native rotation reads (views, no copy)
        if len(self._tables) >= self.size:
            self._tables.pop(next(iter(self._tables)))
        self._tables[key] = (positions, cos, sin)  # holds the positions array, so its id stays its own
        return cos, sin
