"""The bfloat16 backend (decide/bf16.py, csrc/bf16_linear.cpp) against slow numpy references, its
selection, and a tiny model served in bfloat16 next to its float32 reference."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scoring_cases import TICKET as REQUEST

from decide import bf16
from decide.core import Decider, DeciderOptions
from decide.errors import ModelLoadError
from decide.models import load_model

pytestmark = pytest.mark.skipif(not bf16.available(), reason="the oneDNN backend is not built")


def bf16_reference(x: np.ndarray) -> np.ndarray:
    """float32 → the nearest bfloat16 (ties to even), as float32: through float64 arithmetic, not bits.
    bf16 keeps 8 significant bits of float32's exponent range, so its quantum never drops below 2^-133."""
    x = np.asarray(x, np.float64)
    _, exponent = np.frexp(x)  # x = m · 2^e, 0.5 <= |m| < 1
    quantum = np.ldexp(1.0, np.maximum(exponent, -125) - 8)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = (np.round(x / quantum) * quantum).astype(np.float32)  # np.round ties to even
    return np.where(np.isfinite(x), rounded, x.astype(np.float32))


def widen(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


finite_floats = st.floats(width=32, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, st.integers(0, 300), elements=finite_floats))
def test_to_bf16_rounds_to_nearest_even(x):
    bits = bf16._native().to_bf16(x)
    np.testing.assert_array_equal(widen(bits), bf16_reference(x))
    np.testing.assert_array_equal(bf16._native().from_bf16(bits), widen(bits))


def test_to_bf16_keeps_nan_and_infinities():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    back = bf16._native().from_bf16(bf16._native().to_bf16(x))
    assert np.isnan(back[0]) and list(back[1:]) == [np.inf, -np.inf, 0.0, -0.0]
    assert np.signbit(back[4])


def reference_linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    y = bf16_reference(x).astype(np.float64) @ bf16_reference(w).astype(np.float64).T
    return y if b is None else y + b


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 70),
    in_features=st.integers(1, 300),
    out_features=st.integers(1, 200),
    lead=st.sampled_from([(), (1,), (2,)]),
    bias=st.booleans(),
    packed=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_linear_equals_the_bf16_reference(rows, in_features, out_features, lead, bias, packed, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((out_features, in_features), dtype=np.float32)
    b = rng.standard_normal(out_features, dtype=np.float32) if bias else None
    x = rng.standard_normal((*lead, rows, in_features), dtype=np.float32)
    gemm = bf16._native().Bf16Linear(w, b, packed=packed)
    y = gemm(x)
    assert y.shape == (*lead, rows, out_features) and y.dtype == np.float32
    # float32 accumulation of exact bf16 products: error within a few ulps of the sum of |terms|
    bound = 1e-6 * in_features * (np.abs(bf16_reference(x)) @ np.abs(bf16_reference(w)).T + 1)
    assert np.all(np.abs(y - reference_linear(x, w, b)) <= bound)


def test_linear_takes_strided_input():
    rng = np.random.default_rng(0)
    gemm = bf16._native().Bf16Linear(rng.standard_normal((8, 16), dtype=np.float32))
    x = rng.standard_normal((5, 32), dtype=np.float32)[:, ::2]
    np.testing.assert_array_equal(gemm(x), gemm(x.copy()))
    np.testing.assert_array_equal(gemm(x.T.copy().T), gemm(x.copy()))


def test_rows_of_an_unpacked_table():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((50, 12), dtype=np.float32)
    table = bf16._native().Bf16Linear(w, packed=False)
    ids = np.array([[3, 0], [49, 3]])
    np.testing.assert_array_equal(table.rows(ids), bf16_reference(w)[ids])
    with pytest.raises(IndexError):
        table.rows(np.array([50]))
    with pytest.raises(ValueError, match="packed=False"):
        bf16._native().Bf16Linear(w).rows(np.array([0]))


def test_bad_shapes_are_value_errors():
    gemm = bf16._native().Bf16Linear(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"\[\.\.\., 3\]"):
        gemm(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="bias"):
        bf16._native().Bf16Linear(np.ones((4, 3), np.float32), np.ones(3, np.float32))


# ---------------------------------------------------------------- selection


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx512f avx512_bf16\n\nprocessor\t: 1\n")
    assert bf16.native_bf16(bf16.cpu_flags(str(info)))
    info.write_text("flags : fpu sse2 avx2\n")
    assert not bf16.native_bf16(bf16.cpu_flags(str(info)))
    assert bf16.cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.parametrize(("native", "expected"), [(True, "bfloat16"), (False, "float32")])
def test_auto_picks_bf16_only_on_native_bf16(monkeypatch, native, expected):
    monkeypatch.setattr(bf16, "native_bf16", lambda flags=None: native)
    assert bf16.resolve_precision("auto") == expected
    monkeypatch.setenv("DECIDE_PRECISION", "auto")
    assert bf16.resolve_precision(None) == expected
    assert bf16.resolve_precision("float32") == "float32"
    assert bf16.resolve_precision("BFloat16") == "bfloat16"  # asked for: runs even without native bf16


def test_auto_is_float32_without_the_backend(monkeypatch):
    monkeypatch.setattr(bf16, "available", lambda: False)
    monkeypatch.setattr(bf16, "native_bf16", lambda flags=None: True)
    assert bf16.resolve_precision("auto") == "float32"
    with pytest.raises(ValueError, match="oneDNN"):
        bf16.resolve_precision("bfloat16")


def test_bfloat16_without_bf16_kernels_runs_with_a_warning(monkeypatch, caplog):
    """AVX2-only CPUs: oneDNN has no bf16 GEMMs, so the bf16-rounded operands run as float32 GEMMs."""

    class NoBf16Kernels:
        @staticmethod
        def has_bf16_kernels() -> bool:
            return False

    monkeypatch.setattr(bf16, "_native", lambda: NoBf16Kernels)
    monkeypatch.setattr(bf16, "device", lambda: "cpu")
    with caplog.at_level(logging.WARNING, logger="decide.bf16"):
        assert bf16.resolve_precision("bfloat16") == "bfloat16"
    assert "float32 GEMMs" in caplog.text


def test_a_cpu_with_native_bf16_gets_onednn_bf16_kernels():
    assert bf16._native().has_bf16_kernels() or not bf16.native_bf16()


def test_an_unknown_precision_is_a_load_error(tiny_gguf_path, tmp_path):
    with pytest.raises(ModelLoadError, match="float32, bfloat16"):
        load_model(str(tiny_gguf_path), cache_dir=tmp_path, progress=False, precision="fp8")


# ---------------------------------------------------------------- a tiny model in bfloat16


@pytest.fixture(scope="module")
def tiny_bf16(tiny_gguf_path, tmp_path_factory):
    return load_model(
        str(tiny_gguf_path), cache_dir=tmp_path_factory.mktemp("bf16"), progress=False, precision="bfloat16"
    )


def test_the_loaded_model_holds_no_float32_weight_matrix(tiny_bf16):
    from mlx.utils import tree_flatten

    assert (tiny_bf16.precision, tiny_bf16.backend) == ("bfloat16", "onednn")
    assert all(v.ndim == 1 for _, v in tree_flatten(tiny_bf16.model.parameters()))  # only the norms' weights
    assert Decider(tiny_bf16).info["precision"] == "bfloat16"


@pytest.mark.parametrize("scorer", ["trie", "prompt_once", "reference"])
def test_bf16_answers_are_close_to_float32(tiny_bf16, tiny_model, scorer):
    """Every scorer runs on the bf16 model; each is compared with the float32 reference."""
    expected = Decider(tiny_model, DeciderOptions(scorer="reference")).decide(REQUEST)
    got = Decider(tiny_bf16, DeciderOptions(scorer=scorer)).decide(REQUEST)
    for a, b in zip(got.answers, expected.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=0.02, rtol=0)


def test_bf16_trie_equals_bf16_reference_closely(tiny_bf16):
    """Same weights, same precision: the engine's tree-masked pass and the per-candidate reference agree
    up to the bf16 rounding of activations computed in a different order."""
    trie = Decider(tiny_bf16).decide(REQUEST)
    reference = Decider(tiny_bf16, DeciderOptions(scorer="reference")).decide(REQUEST)
    for a, b in zip(trie.answers, reference.answers):
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=0.01, rtol=0)


def test_the_prefix_cache_keys_name_the_precision(tiny_bf16, tiny_model):
    assert Decider(tiny_bf16).trie.cache.root != Decider(tiny_model).trie.cache.root
