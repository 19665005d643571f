"""decide.bf16's modules beyond a single linear layer: fused sibling projections (q/k/v as one GEMM)
against their own linear layers, and the native RMSNorm against a float64 reference."""

from __future__ import annotations

import mlx.nn as nn
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decide import bf16
from decide.models import load_model
from decide.runtime import mx

pytestmark = pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")


def linear(rng, out_features: int, in_features: int, bias: bool) -> nn.Linear:
    lin = nn.Linear(in_features, out_features, bias=bias)
    lin.weight = mx.array(rng.standard_normal((out_features, in_features), dtype=np.float32))
    if bias:
        lin.bias = mx.array(rng.standard_normal(out_features, dtype=np.float32))
    return lin


@settings(max_examples=30, deadline=None)
@given(
    outs=st.lists(st.integers(1, 100), min_size=2, max_size=3),
    in_features=st.integers(1, 120),
    rows=st.integers(1, 40),
    biases=st.lists(st.booleans(), min_size=3, max_size=3),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_member_equals_its_own_bf16_linear(outs, in_features, rows, biases, seed):
    rng = np.random.default_rng(seed)
    linears = [linear(rng, n, in_features, b) for n, b in zip(outs, biases)]
    fused = bf16.FusedLinears(linears)
    members = [bf16.Bf16FusedMember(fused, i) for i in range(len(linears))]
    x = mx.array(rng.standard_normal((1, rows, in_features), dtype=np.float32))
    for member, lin in zip(members, linears):
        alone = np.asarray(bf16.Bf16Linear(lin)(x))
        np.testing.assert_allclose(np.asarray(member(x)), alone, rtol=1e-5, atol=1e-5 * np.abs(alone).max())


def test_a_member_called_with_another_input_computes_its_own():
    rng = np.random.default_rng(3)
    linears = [linear(rng, 8, 16, True), linear(rng, 4, 16, False)]
    fused = bf16.FusedLinears(linears)
    first, second = (bf16.Bf16FusedMember(fused, i) for i in range(2))
    x, y = (mx.array(rng.standard_normal((5, 16), dtype=np.float32)) for _ in range(2))
    want = np.asarray(bf16.Bf16Linear(linears[1])(y))
    first(x)  # x's outputs wait for `second`, which reads y instead
    np.testing.assert_array_equal(np.asarray(second(y)), want)
    np.testing.assert_array_equal(np.asarray(second(y)), want)  # and again, its output taken already


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 50),
    dim=st.integers(1, 600),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    eps=st.sampled_from([1e-6, 1e-5]),
    seed=st.integers(0, 2**32 - 1),
)
def test_native_rms_norm_equals_the_reference(rows, dim, scale, eps, seed):
    rng = np.random.default_rng(seed)
    x = (scale * rng.standard_normal((1, rows, dim))).astype(np.float32)
    norm = nn.RMSNorm(dim, eps=eps)
    norm.weight = mx.array(rng.standard_normal(dim, dtype=np.float32))
    got = np.asarray(bf16.NativeRMSNorm(norm)(mx.array(x)))
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64**2).mean(axis=-1, keepdims=True) + eps) * np.asarray(norm.weight, np.float64)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=2e-6 * np.sqrt(dim), atol=1e-30)


def test_a_converted_model_fuses_projections_and_has_native_norms(tiny_gguf_path, tmp_path):
    loaded = load_model(str(tiny_gguf_path), cache_dir=tmp_path, progress=False, precision="bfloat16")
    layer = loaded.model.model.layers[0]
    fused = [getattr(layer.self_attn, n) for n in ("q_proj", "k_proj", "v_proj")]
    assert all(isinstance(m, bf16.Bf16FusedMember) for m in fused)
    alone = [layer.self_attn.o_proj, *(getattr(layer.mlp, n) for n in ("gate_proj", "up_proj", "down_proj"))]
    assert all(isinstance(m, bf16.Bf16Linear) for m in alone)
    assert isinstance(layer.input_layernorm, bf16.NativeRMSNorm) and isinstance(
        loaded.model.model.norm, bf16.NativeRMSNorm
    )


def test_a_linear_called_from_two_threads_at_once_gives_each_its_own_result():
    """The GIL is released around the GEMM: each thread brings its own oneDNN scratchpad."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    gemm = bf16._native().Bf16Linear(rng.standard_normal((1536, 576), dtype=np.float32))
    inputs = [rng.standard_normal((300, 576), dtype=np.float32) for _ in range(8)]
    alone = [gemm(x) for x in inputs]
    with ThreadPoolExecutor(2) as pool:
        for _ in range(3):
            for got, want in zip(pool.map(gemm, inputs), alone):
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
def test_the_mlp_on_numpy_buffers_equals_its_layers_around_the_silu_product(tiny_gguf_path, tmp_path, precision):
    from decide.scoring.adapter import kernels

    loaded = load_model(str(tiny_gguf_path), cache_dir=tmp_path, progress=False, precision=precision)
    mlp = loaded.model.model.layers[1].mlp
    y = mx.array(np.random.default_rng(0).standard_normal((1, 37, mlp.gate_proj.gemm.in_features), np.float32))
    want = mlp.down_proj(kernels.native_silu_product(mlp.gate_proj(y), mlp.up_proj(y)))
    got = kernels.onednn_mlp(mlp, y)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert kernels.onednn_mlp(mlp, y.astype(mx.float16)).shape == want.shape  # through MLX, as before
