"""decide.bf16_kernels.attention (csrc/bf16_gemm.cpp through csrc/kernels.cpp) against a slow numpy
reference, on random shapes and masks; and its use by a bfloat16 model's trie engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decide import bf16, bf16_kernels
from decide.core import Decider, DeciderOptions
from decide.models import load_model
from decide.request import DecisionRequest, Question
from decide.scoring.adapter import kernels

pytestmark = pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")


def bf16_reference(x: np.ndarray) -> np.ndarray:
    """Finite float32 → the nearest bfloat16 (8 significant bits, ties to even), as float64."""
    mantissa, exponent = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(np.round(mantissa * 256) / 256, exponent)  # np.round ties to even


def one_pass_numerators():
    """decide._onednn.softmax_numerators where this CPU has it (AVX512-BF16), else None."""
    native = bf16._native() if bf16.available() else None
    if native is None or native.softmax_numerators(np.zeros(1, np.float32), 0.0, 1) is None:
        return None
    return native.softmax_numerators


@pytest.mark.skipif(one_pass_numerators() is None, reason="the CPU converts to bf16 in software (two passes)")
@settings(max_examples=80, deadline=None)
@given(st.integers(0, 100), st.integers(0, 40), st.floats(0.01, 60), st.integers(0, 2**32 - 1))
def test_one_pass_softmax_numerators_are_exp_rounded_to_bf16(n, padding, spread, seed) -> None:
    rng = np.random.default_rng(seed)
    scores = (spread * rng.standard_normal(n)).astype(np.float32)
    scores[rng.random(n) < 0.2] = -np.inf  # masked keys
    seen = np.isfinite(scores)
    top = np.float32(scores[seen].max() if seen.any() else 0.0)
    bits, total = one_pass_numerators()(scores, top, n + padding)
    want = np.where(seen, np.exp(scores.astype(np.float64) - np.float64(top)), 0.0)
    got = bf16._native().from_bf16(bits)
    assert np.all(got[n:] == 0) and np.all(got[:n][~seen] == 0)
    # exp to float32 precision, then to the nearest bf16 (half an ulp: 2^-9 relative); exp clamps its argument
    # at -87, so a numerator below e^-87 (1.6e-38) comes out as that
    assert np.all(np.abs(got[:n] - want) <= 2.0**-8 * want + 1.7e-38)
    assert total == pytest.approx(want.sum(), rel=1e-5, abs=1e-37)


def reference_attention(q, k, v, scale, visible) -> np.ndarray:
    """softmax over the visible keys of (bf16(q · scale) · bf16(k)ᵀ), times v: float64, one head at a time.
    A query that sees no key gets zeros."""
    heads, kv_heads = q.shape[0], k.shape[0]
    qs, ks = bf16_reference(q * np.float32(scale)), bf16_reference(k)
    out = np.zeros(q.shape)
    for h in range(heads):
        g = h // (heads // kv_heads)
        scores = np.where(visible, qs[h] @ ks[g].T, -np.inf)
        top = scores.max(axis=1, keepdims=True)
        weights = np.where(visible, np.exp(scores - np.where(np.isfinite(top), top, 0)), 0.0)
        total = weights.sum(axis=1, keepdims=True)
        out[h] = np.divide(weights @ v[g], total, out=np.zeros_like(out[h]), where=total > 0)
    return out


def assert_close(got, want, v):
    # what is left after the reference's rounding: the softmax weights and v rounded to bf16 for p·v
    # (8 significant bits each), and float32 sums
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=2**-7 * float(np.abs(v).max(initial=1.0)), rtol=0)


shapes = st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from([1, 3]), st.sampled_from([1, 8, 64]))


@settings(max_examples=40, deadline=None)
@given(shape=shapes, length=st.integers(1, 150), extra=st.integers(0, 700), seed=st.integers(0, 2**32 - 1))
def test_causal_attention_equals_the_reference(shape, length, extra, seed):
    """Query i sees keys j <= i + extra: spans past one 512-key block, tiles past 64 rows, two threads."""
    kv_heads, group, dim = shape
    rng = np.random.default_rng(seed)
    span = length + extra
    q = rng.standard_normal((kv_heads * group, length, dim), dtype=np.float32)
    k, v = (rng.standard_normal((kv_heads, span, dim), dtype=np.float32) for _ in range(2))
    scale = 1 / np.sqrt(dim)
    got = bf16_kernels.attention(q, k, v, scale, None, causal_offset=extra)
    visible = np.arange(span)[None, :] <= np.arange(length)[:, None] + extra
    assert_close(got, reference_attention(q, k, v, scale, visible), v)


@settings(max_examples=40, deadline=None)
@given(
    shape=shapes,
    length=st.integers(1, 150),
    shared=st.integers(0, 600),
    own=st.integers(1, 80),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_tree_masked_attention_equals_the_reference(shape, length, shared, own, density, seed):
    """A forest's pass: keys [0, shared) seen by every query, each query's own keys after them at random."""
    kv_heads, group, dim = shape
    rng = np.random.default_rng(seed)
    span = shared + own
    q = rng.standard_normal((kv_heads * group, length, dim), dtype=np.float32)
    k, v = (rng.standard_normal((kv_heads, span, dim), dtype=np.float32) for _ in range(2))
    visible = np.concatenate([np.ones((length, shared), bool), rng.random((length, own)) < density], axis=1)
    bias = np.where(visible, 0.0, -np.inf).astype(np.float32)
    got = bf16_kernels.attention(q, k, v, 0.125, bias, shared=shared)
    assert_close(got, reference_attention(q, k, v, 0.125, visible), v)


def layouts(x: np.ndarray) -> dict[str, np.ndarray]:
    """The same [heads, span, dim] values in memory layouts a caller may hand over (the kernel converts k and v
    to bf16 once per call: in one piece where the heads fill their memory without gaps, else row by row)."""
    heads, span, dim = x.shape
    padded = np.zeros((heads, span + 3, dim + 5), np.float32)
    padded[:, 1 : span + 1, 2 : dim + 2] = x
    spaced = np.zeros((heads, 2 * span, dim), np.float32)
    spaced[:, ::2] = x
    return {
        "contiguous": x,
        "span-major (MLX's heads of one sequence)": np.ascontiguousarray(x.transpose(1, 0, 2)).transpose(1, 0, 2),
        "padded rows": padded[:, 1 : span + 1, 2 : dim + 2],
        "every other row": spaced[:, ::2],
    }


@pytest.mark.parametrize("bias", [False, True])
def test_key_and_value_layouts_give_the_same_result(bias):
    rng = np.random.default_rng(11)
    q = rng.standard_normal((6, 90, 16), dtype=np.float32)
    k, v = (rng.standard_normal((3, 600, 16), dtype=np.float32) for _ in range(2))
    mask = np.where(rng.random((90, 600)) < 0.5, 0.0, -np.inf).astype(np.float32) if bias else None
    mask_args = dict(shared=500) if bias else dict(causal_offset=510)
    if bias:
        mask[:, :500] = 0.0
    want = bf16_kernels.attention(q, k, v, 0.25, mask, **mask_args)
    for name, (kl, vl) in zip(layouts(k), zip(layouts(k).values(), layouts(v).values())):
        assert np.array_equal(kl, k) and np.array_equal(vl, v)
        got = bf16_kernels.attention(q, kl, vl, 0.25, mask, **mask_args)
        # the same bf16 operands; only the GEMM's order of sums may differ with the row stride
        np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(v).max(), rtol=0, err_msg=name)


def test_threads_give_the_same_result_every_time():
    """Two threads run tiles at once, each with its own oneDNN scratchpad: no row may pick up another's."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((9, 700, 64), dtype=np.float32)
    k, v = (rng.standard_normal((3, 700, 64), dtype=np.float32) for _ in range(2))
    first = bf16_kernels.attention(q, k, v, 0.125, None)
    for _ in range(5):
        np.testing.assert_array_equal(bf16_kernels.attention(q, k, v, 0.125, None), first)


def test_bad_shapes_are_value_errors():
    q = np.ones((4, 5, 8), np.float32)
    with pytest.raises(ValueError, match="kv_heads dividing heads"):
        bf16_kernels.attention(q, np.ones((3, 5, 8), np.float32), np.ones((3, 5, 8), np.float32), 1.0, None)
    with pytest.raises(ValueError, match="bias"):
        bf16_kernels.attention(q, *(np.ones((2, 5, 8), np.float32),) * 2, 1.0, np.zeros((5, 4), np.float32))


REQUEST = DecisionRequest.of(
    "The invoice page keeps loading forever and I cannot download my receipts.",
    [
        Question.predicate("Is this a bug report?"),
        Question.choice("Which team should take it?", ["billing", "technical", "sales"]),
    ],
)


def test_a_bf16_models_trie_runs_bf16_attention(tiny_gguf_path, tmp_path, tiny_model, monkeypatch):
    loaded = load_model(str(tiny_gguf_path), cache_dir=tmp_path, progress=False, precision="bfloat16")
    decider = Decider(loaded, DeciderOptions(scorer="trie"))
    assert decider.parts.backend.attention is kernels.bf16_attention
    calls = []
    monkeypatch.setattr(bf16_kernels, "attention", lambda *a, **kw: calls.append(1) or bf16._native().attention(*a))
    got = decider.decide(REQUEST)
    assert calls
    expected = Decider(tiny_model, DeciderOptions(scorer="reference")).decide(REQUEST)
    for a, b in zip(got.answers, expected.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=0.02, rtol=0)
    assert Decider(tiny_model).parts.backend.attention is kernels.native_attention  # float32 stays float32
