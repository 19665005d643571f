"""Precision int8 (decide/int8.py, Int8Linear in csrc/bf16_linear.cpp) against slow numpy references,
and a tiny model loaded in int8 next to its float32 reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scoring_cases import TICKET as REQUEST

from decide import bf16, int8
from decide.core import Decider, DeciderOptions
from decide.models import load_model

pytestmark = pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")


def quantized_rows(a: np.ndarray, factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row of a (times factors) as int8 steps and its scale, max |row| / 127, in float32 as the kernel."""
    a = (a * factors if factors is not None else a).astype(np.float32)
    peak = np.abs(a).max(axis=-1, initial=0.0)
    scale = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    steps = np.round(a * (np.float32(1) / scale)[:, None])
    return steps.astype(np.int64), scale


def reference_int8_linear(x, w, b, smooth):
    unsmooth = None if smooth is None else (np.float32(1) / smooth).astype(np.float32)
    xq, xs = quantized_rows(x, unsmooth)
    wq, ws = quantized_rows(w, smooth)
    y = (xq @ wq.T).astype(np.float64) * xs[:, None] * ws[None, :]
    step = xs[:, None] * ws[None, :] * 127 * 2  # one step off in an element rounded at a tie, with margin
    return (y if b is None else y + b), step


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 70),
    in_features=st.integers(1, 300),
    out_features=st.integers(1, 200),
    bias=st.booleans(),
    smoothed=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_int8_linear_equals_the_int8_reference(rows, in_features, out_features, bias, smoothed, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((out_features, in_features), dtype=np.float32)
    b = rng.standard_normal(out_features, dtype=np.float32) if bias else None
    spread = rng.uniform(0.1, 30, in_features).astype(np.float32)  # channels of unlike ranges
    x = rng.standard_normal((rows, in_features), dtype=np.float32) * spread
    smooth = rng.uniform(0.2, 5.0, in_features).astype(np.float32) if smoothed else None
    y = bf16._native().Int8Linear(w, b, smooth)(x)
    assert y.shape == (rows, out_features) and y.dtype == np.float32
    want, step = reference_int8_linear(x, w, b, smooth)
    assert np.all(np.abs(y - want) <= 1e-5 * np.abs(want) + step + 1e-6)


def test_int8_linear_is_close_to_the_float_product():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 256), dtype=np.float32)
    x = rng.standard_normal((40, 256), dtype=np.float32)
    y = bf16._native().Int8Linear(w, None)(x)
    exact = x.astype(np.float64) @ w.T
    assert np.abs(y - exact).max() < 0.03 * np.abs(exact).max()  # int8 steps of two operands: ~1%


def test_smoothing_moves_an_outlier_channel_into_the_weight():
    """x with one channel 100x the rest: unsmoothed, per-row int8 leaves the rest a few steps; smoothed,
    the error drops (the product is unchanged, x / s · (W s)ᵀ = x Wᵀ)."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 128), dtype=np.float32)
    x = rng.standard_normal((32, 128), dtype=np.float32)
    x[:, 5] *= 100
    exact = x.astype(np.float64) @ w.T
    factors = int8.smoothing(np.abs(x).max(axis=0), np.abs(w).max(axis=0), 0.5)
    plain = np.abs(bf16._native().Int8Linear(w, None)(x) - exact).mean()
    smoothed = np.abs(bf16._native().Int8Linear(w, None, factors)(x) - exact).mean()
    assert smoothed < plain / 3


def test_smoothing_factors():
    factors = int8.smoothing(np.array([4.0, 0.0, 9.0], np.float32), np.array([1.0, 2.0, 0.0], np.float32), 0.5)
    np.testing.assert_allclose(factors, [2.0, 1.0, 1.0])
    assert factors.dtype == np.float32


@pytest.mark.parametrize("smooth", [np.ones(3, np.float32), np.array([1.0, 0.0, 1.0], np.float32), [1.0, np.nan, 1.0]])
def test_bad_smoothing_factors_are_value_errors(smooth):
    with pytest.raises(ValueError, match="smooth"):
        bf16._native().Int8Linear(np.ones((2, 4), np.float32), None, np.asarray(smooth, np.float32))


# ---------------------------------------------------------------- a tiny model in int8


@pytest.fixture(scope="module")
def tiny_int8(tiny_gguf_path, tmp_path_factory):
    return load_model(str(tiny_gguf_path), cache_dir=tmp_path_factory.mktemp("int8"), progress=False, precision="int8")


def test_every_linear_layer_but_the_kept_ones_is_int8(tiny_int8):
    kinds = {}
    for name, module in tiny_int8.model.named_modules():
        gemm = getattr(module, "gemm", None) or getattr(getattr(module, "_fused", None), "gemm", None)
        if gemm is not None:
            kinds[name.rpartition(".")[2]] = type(gemm).__name__
    assert kinds["down_proj"] == "Bf16Linear"
    assert {kinds[n] for n in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj")} == {"Int8Linear"}
    assert (tiny_int8.precision, tiny_int8.backend) == ("int8", "onednn")
    assert Decider(tiny_int8).info["precision"] == "int8"


@pytest.mark.parametrize("scorer", ["trie", "reference"])
def test_int8_answers_are_close_to_float32(tiny_int8, tiny_model, scorer):
    expected = Decider(tiny_model, DeciderOptions(scorer="reference")).decide(REQUEST)
    got = Decider(tiny_int8, DeciderOptions(scorer=scorer)).decide(REQUEST)
    for a, b in zip(got.answers, expected.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=0.05, rtol=0)


def test_int8_trie_passes_its_self_test_and_keys_its_cache_apart(tiny_int8, tiny_gguf_path, tmp_path):
    decider = Decider(tiny_int8)
    assert decider.info["scorer"] == "trie" and decider.parts.backend.name == "cpu-bfloat16"
    tiny_bf16 = load_model(str(tiny_gguf_path), cache_dir=tmp_path, progress=False, precision="bfloat16")
    assert decider.trie.cache.root != Decider(tiny_bf16).trie.cache.root
