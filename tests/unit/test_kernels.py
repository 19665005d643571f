"""The kernel backends (decide/scoring/adapter): every backend's kernels equal MLX's stock ops (the mlx backend) on
random shapes, groupings, causal offsets, tree masks and strided views; the native kernels (csrc/kernels.cpp) ==
their MLX twins; fast_exp == exp; rope tables == the model's rope; the native rope == by hand."""

import ctypes

import mlx.nn as nn
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decide import _native
from decide.runtime import device, mx
from decide.scoring.adapter import backends, kernels

needs_blas = pytest.mark.skipif(
    device() != "cpu" or not _native.attention_available(), reason="no optimized BLAS for the native attention"
)
CPU_BACKENDS = [backends.cpu_float32(), backends.cpu_bfloat16()]

TOLERANCE = 2e-5
# Of max |v|: bf16 attention rounds the softmax's weights to bf16 (8 significant bits) before p · v.
BF16_TOLERANCE = 1e-2


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
        mask = kernels.additive_bias(mx.array(seen))
    return q, k, v, float(dim**-0.5), mask


def stock(q, k, v, scale, mask):
    bias = kernels.causal_bias(q.shape[2], k.shape[2], mask) if isinstance(mask, int) else mask
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=bias)


@needs_blas
@settings(max_examples=150, deadline=None)
@given(attention_inputs())
def test_native_attention_equals_its_mlx_twin_and_mlx_sdpa(inputs) -> None:
    want = np.asarray(stock(*inputs))
    native = np.asarray(kernels.native_attention(*inputs))
    twin = np.asarray(kernels.mlx_attention(*inputs))
    assert np.abs(native - want).max() <= TOLERANCE
    assert np.abs(twin - want).max() <= TOLERANCE


@needs_blas
@settings(max_examples=60, deadline=None)
@given(attention_inputs(), st.integers(1, 3), st.sampled_from(CPU_BACKENDS))
def test_every_backends_kernels_equal_the_mlx_backends(inputs, batch, backend) -> None:
    q, k, v, scale, mask = inputs
    q, k, v = (mx.concatenate([a] * batch) for a in (q, k, v))  # batches take the MLX twin
    reference = backends.mlx()
    got = np.asarray(backend.attention(q, k, v, scale, mask, 0))
    error = np.abs(got - np.asarray(reference.attention(q, k, v, scale, mask, 0))).max()
    if backend.name == "cpu-bfloat16":  # or the kernel's bf16 operands: q · scale, k and v rounded
        rounded = [(a * s).astype(mx.bfloat16).astype(mx.float32) for a, s in ((q, scale), (k, 1.0), (v, 1.0))]
        error = min(error, np.abs(got - np.asarray(reference.attention(*rounded, 1.0, mask, 0))).max())
        assert error <= BF16_TOLERANCE * float(mx.abs(v).max())
    else:
        assert error <= TOLERANCE
    gate, up = q * 3, k[:, :1, :1] + q
    want = np.asarray(reference.silu_product(gate, up))
    assert np.allclose(np.asarray(backend.silu_product(gate, up)), want, rtol=1e-5, atol=1e-6)
    rope = nn.RoPE(q.shape[-1], traditional=batch == 2, base=10000)
    positions = mx.array(np.arange(q.shape[2], dtype=np.int32)[::-1] * 7)
    want = np.asarray(reference.rope(rope, q[:1], positions))
    assert np.abs(np.asarray(backend.rope(rope, q[:1], positions)) - want).max() <= 1e-5


@needs_blas
def test_the_causal_offset_hides_exactly_the_later_keys() -> None:
    rng = np.random.default_rng(1)
    q, k, v = (mx.array(rng.standard_normal((1, 2, n, 8), dtype=np.float32)) for n in (3, 6, 6))
    got = np.asarray(kernels.native_attention(q, k, v, 1.0, 2))  # query i sees keys 0..i+2
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
    assert np.abs(np.asarray(kernels.native_attention(*inputs)) - np.asarray(stock(*inputs))).max() <= TOLERANCE


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
    rel = np.abs(np.asarray(kernels.fast_exp(x)) / np.exp(np.asarray(x, np.float64)) - 1)
    assert rel.max() < 1e-6


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=2), st.integers(0, 2**32 - 1))
def test_native_silu_product_equals_its_mlx_twin_and_nn_silu(shape, seed) -> None:
    shape = [1, *shape]  # [batch, tokens, features] as in a model
    rng = np.random.default_rng(seed)
    gate, up = (mx.array(8 * rng.standard_normal(shape, dtype=np.float32)) for _ in range(2))
    want = np.asarray(nn.silu(gate) * up)
    for got in (kernels.native_silu_product(gate, up), kernels.mlx_silu_product(gate, up)):
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
    tables = kernels.RopeTables()
    along_batch = rope(x.transpose(2, 1, 0, 3), offset=positions).transpose(2, 1, 0, 3)
    for offsets, want in ((mx.arange(4000, 4037), rope(x, offset=4000)), (positions, along_batch)):
        for _ in range(2):  # computed, then from the table
            assert np.abs(np.asarray(tables(rope, x, offsets)) - np.asarray(want)).max() <= 1e-6
        twice = np.asarray(tables(rope, mx.concatenate([x, 2 * x]), offsets))  # a batch of two rows
        assert np.abs(twice - np.stack([want[0], 2 * want[0]])).max() <= 2e-6


def rotated_by_hand(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, dims: int, traditional: bool) -> np.ndarray:
    """x [H, L, D] with row i's first `dims` features rotated by row i of cos and sin, pair by pair, in float64."""
    out = x.astype(np.float64)
    half = dims // 2
    for j in range(half):
        a, b = (2 * j, 2 * j + 1) if traditional else (j, j + half)
        out[..., a] = x[..., a] * cos[:, j] - x[..., b] * sin[:, j]
        out[..., b] = x[..., a] * sin[:, j] + x[..., b] * cos[:, j]
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 40),
    st.sampled_from([2, 8, 64]),
    st.data(),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_native_rope_rotates_strided_heads_as_by_hand(heads, length, dim, data, traditional, seed) -> None:
    dims = data.draw(st.sampled_from([d for d in (2, dim // 2, dim) if d >= 2 and d % 2 == 0]))
    rng = np.random.default_rng(seed)
    # As a projection's output: [L, heads + others, D], its heads taken and transposed to [H, L, D] (strided).
    x = rng.standard_normal((length, heads + 2, dim), dtype=np.float32)[:, 1 : 1 + heads].transpose(1, 0, 2)
    angles = rng.uniform(-50, 50, (length, dims // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    got = _native.rope(x, cos, sin, dims, traditional)
    assert got.flags.c_contiguous and got.shape == x.shape
    assert np.abs(got - rotated_by_hand(x, cos, sin, dims, traditional)).max() <= 1e-5


def test_native_rope_refuses_mismatched_tables() -> None:
    x = np.zeros((2, 3, 8), np.float32)
    with pytest.raises(ValueError, match="cos and sin"):
        _native.rope(x, np.zeros((3, 2), np.float32), np.zeros((3, 4), np.float32), 8, False)
    with pytest.raises(ValueError, match="dims must be even"):
        _native.rope(x, np.zeros((3, 2), np.float32), np.zeros((3, 2), np.float32), 5, False)
    with pytest.raises(ValueError, match="contiguous last axis"):
        _native.rope(x[..., ::2], np.zeros((3, 2), np.float32), np.zeros((3, 2), np.float32), 4, False)


def test_rope_tables_leave_other_ropes_to_the_model() -> None:
    class ScaledRoPE(nn.RoPE):
        def __call__(self, x, offset=0):
            return 2 * super().__call__(x, offset)

    x = mx.random.normal((1, 2, 5, 8), key=mx.random.key(5))
    positions = mx.arange(3, 8)
    tables = kernels.RopeTables()
    for rope, y in ((ScaledRoPE(8), x), (nn.RoPE(8), x.astype(mx.float16))):
        want = np.asarray(kernels.stock_rope(rope, y, positions))
        assert np.array_equal(np.asarray(tables(rope, y, positions)), want)
    assert not tables._tables


def test_backends_are_chosen_by_device_and_precision() -> None:
    assert backends.choose("gpu", "float16", "float16").name == "mlx"
    assert backends.choose("cpu", "float32", "float32", "mlx").name == "mlx"
    with pytest.raises(ValueError, match="unknown kernel backend"):
        backends.choose("cpu", "float32", "float32", "cuda")
    with pytest.raises(ValueError, match="does not fit"):
        backends.choose("gpu", "float16", "float16", "cpu-float32")
    assert backends.choose("cpu", "float32", "float32").name == "cpu-float32"
    assert backends.choose("cpu", "float32", "bfloat16").name == "cpu-bfloat16"
