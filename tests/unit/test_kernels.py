"""The trie engine's CPU kernels (csrc/kernels.cpp): native attention == its MLX twin == MLX's own SDPA, on random
shapes, groupings, causal offsets, tree masks and strided views; native SiLU product == MLX twin == nn.silu; fast_exp
== exp."""

import ctypes

import mlx.nn as nn
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decide import _native
from decide.runtime import mx
from decide.scoring import fast_kernels

needs_blas = pytest.mark.skipif(not fast_kernels._native_fits(), reason="no optimized BLAS for the native attention")

TOLERANCE = 2e-5


@st.composite
def attention_inputs(draw):
    """q [1, H, L, D], k and v [1, Hkv, S, D] as strided views of larger buffers, and a mask: a causal offset or
    a random bias where every query sees at least one key."""
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * draw(st.integers(1, 3))
    dim = draw(st.sampled_from([4, 8, 64]))
    span = draw(st.integers(1, 300))
    length = draw(st.integers(1, span))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = mx.array(3 * rng.standard_normal((1, length, heads, dim), dtype=np.float32)).transpose(0, 2, 1, 3)
    spare = draw(st.integers(0, 40))  # K/V as a cache holds them: the first S rows of a longer buffer
    k = mx.array(rng.standard_normal((1, kv_heads, span + spare, dim), dtype=np.float32))[:, :, :span]
    v = mx.array(rng.standard_normal((1, kv_heads, span + spare, dim), dtype=np.float32))[:, :, :span]
    if draw(st.booleans()):
        mask = draw(st.integers(0, span - 1))
    else:
        seen = rng.random((length, span)) < draw(st.floats(0.05, 1.0))
        seen[np.arange(length), rng.integers(0, span, length)] = True
        mask = fast_kernels.additive_bias(mx.array(seen))
    return q, k, v, float(dim**-0.5), mask


def stock(q, k, v, scale, mask):
    bias = fast_kernels.causal_bias(q.shape[2], k.shape[2], mask) if isinstance(mask, int) else mask
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=bias)


@needs_blas
@settings(max_examples=150, deadline=None)
@given(attention_inputs())
def test_native_attention_equals_its_mlx_twin_and_mlx_sdpa(inputs) -> None:
    want = np.asarray(stock(*inputs))
    native = np.asarray(fast_kernels.attention(*inputs))
    twin = np.asarray(fast_kernels.mlx_attention(*inputs))
    assert np.abs(native - want).max() <= TOLERANCE
    assert np.abs(twin - want).max() <= TOLERANCE


@needs_blas
def test_the_causal_offset_hides_exactly_the_later_keys() -> None:
    rng = np.random.default_rng(1)
    q, k, v = (mx.array(rng.standard_normal((1, 2, n, 8), dtype=np.float32)) for n in (3, 6, 6))
    got = np.asarray(fast_kernels.attention(q, k, v, 1.0, 2))  # query i sees keys 0..i+2
    for i in range(3):
        sub = [a[:, :, : i + 3] for a in (k, v)]
        want = np.asarray(mx.fast.scaled_dot_product_attention(q[:, :, i : i + 1], *sub, scale=1.0))
        assert np.abs(got[:, :, i : i + 1] - want).max() <= TOLERANCE


@needs_blas
def test_long_spans_take_several_tiles() -> None:
    rng = np.random.default_rng(2)
    q = mx.array(rng.standard_normal((1, 9, 300, 64), dtype=np.float32))
    k, v = (mx.array(rng.standard_normal((1, 3, 5000, 64), dtype=np.float32)) for _ in range(2))
    inputs = (q, k, v, 0.125, 5000 - 300)
    assert np.abs(np.asarray(fast_kernels.attention(*inputs)) - np.asarray(stock(*inputs))).max() <= TOLERANCE


@needs_blas
@needs_blas
def test_threaded_attention_gives_the_blas_its_threads_back() -> None:
    process = ctypes.CDLL(None)
    get = next((getattr(process, n) for n in ("openblas_get_num_threads", "scipy_openblas_get_num_threads")
                if hasattr(process, n)), None)  # fmt: skip
    if get is None:
        pytest.skip("no OpenBLAS thread control: the native attention runs on one thread")
    before = get()
    test_long_spans_take_several_tiles()  # big enough for the threaded path
    assert get() == before


@pytest.mark.parametrize(
    "q_shape, kv_shape, bias_shape",
    [
        ((3, 3, 8), (2, 5, 8), None),  # 2 KV heads do not divide 3 query heads
        ((2, 3, 8), (1, 5, 4), None),  # head sizes differ
        ((2, 3, 8), (1, 0, 8), None),  # no keys
        ((2, 3, 8), (1, 5, 8), (3, 4)),  # the bias is not [length, span]
    ],
)
def test_the_native_kernel_refuses_mismatched_shapes(q_shape, kv_shape, bias_shape) -> None:
    arrays = [np.zeros(s, np.float32) for s in (q_shape, kv_shape, kv_shape)]
    bias = None if bias_shape is None else np.zeros(bias_shape, np.float32)
    with pytest.raises(ValueError):
        _native.attention(*arrays, 1.0, bias, 0)


@needs_blas
def test_the_native_kernel_refuses_a_strided_last_axis() -> None:
    q = np.zeros((1, 3, 16), np.float32)[:, :, ::2]
    with pytest.raises(ValueError, match="contiguous last axis"):
        _native.attention(q, np.zeros((1, 4, 8), np.float32), np.zeros((1, 4, 8), np.float32), 1.0, None, 0)


def test_fast_exp_matches_exp_to_float32_precision() -> None:
    x = mx.array(np.linspace(-87, 88, 200_001, dtype=np.float32))
    rel = np.abs(np.asarray(fast_kernels.fast_exp(x)) / np.exp(np.asarray(x, np.float64)) - 1)
    assert rel.max() < 1e-6


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=2), st.integers(0, 2**32 - 1))
def test_native_silu_product_equals_its_mlx_twin_and_nn_silu(shape, seed) -> None:
    shape = [1, *shape]  # [batch, tokens, features] as in a model
    rng = np.random.default_rng(seed)
    gate, up = (mx.array(8 * rng.standard_normal(shape, dtype=np.float32)) for _ in range(2))
    want = np.asarray(nn.silu(gate) * up)
    for got in (fast_kernels.silu_product(gate, up), fast_kernels.mlx_silu_product(gate, up)):
        assert np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_the_native_silu_product_refuses_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="one shape"):
        _native.silu_product(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))


@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("dims", [64, 32])
def test_rope_tables_rotate_exactly_as_the_models_rope(traditional, dims) -> None:
    rope = nn.RoPE(dims, traditional=traditional, base=100000)
    x = mx.random.normal((1, 9, 37, 64), key=mx.random.key(3))
    positions = mx.array(np.random.default_rng(4).integers(0, 5000, 37).astype(np.int32))
    tables = fast_kernels.RopeTables()
    along_batch = rope(x.transpose(2, 1, 0, 3), offset=positions).transpose(2, 1, 0, 3)  # PositionalRoPE's way
    for offset, want in ((4000, rope(x, offset=4000)), (positions, along_batch)):
        for _ in range(2):  # computed, then from the table
            assert np.abs(np.asarray(tables.rotate(rope, x, offset)) - np.asarray(want)).max() <= 1e-6


def test_rope_tables_leave_other_ropes_and_odd_calls_to_the_model() -> None:
    class ScaledRoPE(nn.RoPE):
        pass

    x = mx.zeros((1, 2, 5, 8))
    tables = fast_kernels.RopeTables()
    assert tables.rotate(ScaledRoPE(8), x, 0) is None
    assert tables.rotate(nn.RoPE(8), x, mx.arange(4)) is None  # not one position per token
    assert tables.rotate(nn.RoPE(8), x.astype(mx.float16), 0) is None
