"""The log-prob gather: native (Cython) == numpy twin on random logits, input checks, zero-copy MLX input."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decide.scoring.forest import candidate_scores, pair_logits, row_logsumexp
from decide.scoring.forest_reference import (
    candidate_scores_reference,
    pair_logits_reference,
    row_logsumexp_reference,
)


def split(rng: np.random.Generator, total: int, parts: int, min_size: int = 0) -> np.ndarray:
    """int32 offsets[parts + 1] from 0 to total: random part sizes, each >= min_size."""
    cuts = np.sort(rng.integers(0, total - parts * min_size + 1, parts - 1))
    return np.concatenate([[0], cuts + min_size * np.arange(1, parts), [total]]).astype(np.int32)


@st.composite
def gather_inputs(draw):
    """Random logits rows and the pair/candidate/question layout of a forest over them."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    R, V = draw(st.integers(1, 12)), draw(st.integers(1, 40))
    scale = draw(st.sampled_from([1.0, 30.0, 1000.0]))  # 1000: exp would overflow without the max shift
    Q = draw(st.integers(1, 4))
    C = draw(st.integers(Q, 3 * Q + 8))
    M = draw(st.integers(0, 60))
    return dict(
        logits=(rng.standard_normal((R, V)) * scale).astype(np.float32),
        needed=rng.integers(0, 2, R).astype(np.uint8),
        pair_rows=rng.integers(0, R, M).astype(np.int32),
        pair_tokens=rng.integers(0, V, M).astype(np.int32),
        cand_pair_offsets=split(rng, M, C),
        question_cand_offsets=split(rng, C, Q, min_size=1),
    )


@settings(max_examples=200, deadline=None)
@given(gather_inputs())
def test_native_gather_equals_twin(g):
    lse = row_logsumexp(g["logits"], g["needed"])
    assert lse.dtype == np.float64
    assert np.allclose(lse, row_logsumexp_reference(g["logits"], g["needed"]), rtol=1e-12, atol=1e-9)
    assert (lse[g["needed"] == 0] == 0).all()

    picked = pair_logits(g["logits"], g["pair_rows"], g["pair_tokens"])
    assert picked.dtype == np.float32
    assert picked.tolist() == pair_logits_reference(g["logits"], g["pair_rows"], g["pair_tokens"]).tolist()

    layout = (g["pair_rows"], lse, g["cand_pair_offsets"], g["question_cand_offsets"])
    loglik, probs = candidate_scores(picked, *layout)
    want_loglik, want_probs = candidate_scores_reference(picked, *layout)
    assert np.abs(loglik - want_loglik).max() < 1e-6
    assert np.abs(probs - want_probs).max() < 1e-9
    for a, b in itertools.pairwise(g["question_cand_offsets"]):
        assert abs(probs[a:b].sum() - 1) < 1e-12


def test_logsumexp_by_hand():
    logits = np.array([[0, 0, 0, 0], [1000, 1000, -np.inf, -np.inf], [5, 6, 7, 8]], np.float32)
    lse = row_logsumexp(logits, np.array([1, 1, 0], np.uint8))
    assert np.allclose(lse, [np.log(4), 1000 + np.log(2), 0], rtol=1e-15, atol=0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([5_000, 49_152, 151_936]), st.sampled_from([0.1, 4.0, 300.0]))
def test_logsumexp_of_vocabulary_wide_rows_equals_the_twin(seed, vocabulary, spread):
    """Rows as wide as real vocabularies, and spreads whose smallest terms underflow double's exp."""
    logits = (np.random.default_rng(seed).standard_normal((3, vocabulary)) * spread).astype(np.float32)
    needed = np.ones(3, np.uint8)
    np.testing.assert_allclose(row_logsumexp(logits, needed), row_logsumexp_reference(logits, needed), rtol=1e-14)


def test_logsumexp_of_a_row_with_nan_is_nan():
    logits = np.array([[0.0, np.nan, 1.0] + [0.5] * 13], np.float32)
    assert np.isnan(row_logsumexp(logits, np.ones(1, np.uint8))[0])


def test_softmax_within_each_question():
    loglik, probs = candidate_scores(
        np.array([1.0, -1.0, 2.0, 0.5], np.float32),
        np.array([0, 1, 1, 0], np.int32),
        np.array([0.0, 0.5]),
        cand_pair_offsets=np.array([0, 2, 3, 4], np.int32),  # c0: pairs 0 1, c1: pair 2, c2: pair 3
        question_cand_offsets=np.array([0, 2, 3], np.int32),  # q0: c0 c1, q1: c2
    )
    assert loglik.tolist() == [1.0 - 1.0 - 0.5, 2.0 - 0.5, 0.5]
    assert np.allclose(probs, [1 / (1 + np.e**2), np.e**2 / (1 + np.e**2), 1.0], rtol=1e-15)


def test_bad_inputs():
    logits = np.zeros((2, 3), np.float32)
    rows, toks = np.array([0, 1], np.int32), np.array([2, 3], np.int32)
    with pytest.raises(IndexError, match=r"pair_tokens\[1\] = 3"):
        pair_logits(logits, rows, toks)
    with pytest.raises(IndexError, match="pair_rows"):
        pair_logits(logits, np.array([0, 2], np.int32), rows)
    with pytest.raises(ValueError, match="needed"):
        row_logsumexp(logits, np.ones(3, np.uint8))
    with pytest.raises(ValueError):  # not C-contiguous: the caller must pass the rows as one buffer
        row_logsumexp(np.zeros((3, 2), np.float32).T, np.ones(2, np.uint8))
    with pytest.raises(ValueError, match="cand_pair_offsets"):
        candidate_scores(
            np.zeros(2, np.float32), rows, np.zeros(2), np.array([0, 1], np.int32), np.array([0, 1], np.int32)
        )


def test_reads_an_evaluated_mx_array_without_copying():
    from decide.runtime import mx

    a = mx.random.normal((6, 50)) * 5
    mx.eval(a)
    view = np.asarray(a)
    assert view.dtype == np.float32 and view.flags.c_contiguous
    assert np.shares_memory(view, np.asarray(a))  # both are views of MLX's buffer
    needed = np.array([1, 0, 1, 1, 0, 1], np.uint8)
    copy = np.array(view)
    assert row_logsumexp(view, needed).tolist() == row_logsumexp(copy, needed).tolist()
    rows, toks = np.array([0, 5, 2], np.int32), np.array([49, 0, 7], np.int32)
    assert pair_logits(view, rows, toks).tolist() == copy[rows, toks].tolist()
