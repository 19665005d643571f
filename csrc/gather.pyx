# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""decide._gather: per-candidate log-likelihoods and per-question probabilities from the forest's logits rows.

`logits` is float32[R, V], C-contiguous: row r is the model's output at forest node rows[r]. Any buffer works,
including np.asarray() of an evaluated mx.array on CPU, without a copy. Use decide.scoring.forest.
"""

from libc.math cimport INFINITY, exp
from libc.stdint cimport int32_t, uint8_t

import numpy as np

cdef extern from *:
    const char* DECIDE_VERSION

__version__ = DECIDE_VERSION.decode()


cdef extern from "logsumexp.h":
    double decide_row_logsumexp(const float* x, Py_ssize_t n) noexcept nogil


def row_logsumexp(const float[:, ::1] logits, const uint8_t[::1] needed):
    """float64[R]: log Σ_v exp(logits[r, v]) where needed[r], else 0 (max-shifted, in double)."""
    cdef Py_ssize_t R = logits.shape[0], V = logits.shape[1], r
    if needed.shape[0] != R:
        raise ValueError(f"needed has {needed.shape[0]} entries for {R} logits rows")
    if V == 0 and R > 0:
        raise ValueError("logits rows are empty (vocabulary of size 0)")
    out = np.zeros(R, dtype=np.float64)
    cdef double[::1] lse = out
    with nogil:
        for r in range(R):
            if needed[r]:
                lse[r] = decide_row_logsumexp(&logits[r, 0], V)
    return out


cdef Py_ssize_t _first_out_of_range(const int32_t[::1] values, Py_ssize_t bound) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(values.shape[0]):
        if values[i] < 0 or values[i] >= bound:
            return i
    return -1


cdef _check_range(const int32_t[::1] values, Py_ssize_t bound, str name):
    cdef Py_ssize_t bad
    with nogil:
        bad = _first_out_of_range(values, bound)
    if bad >= 0:
        raise IndexError(f"{name}[{bad}] = {values[bad]} is outside [0, {bound})")


def pair_logits(const float[:, ::1] logits, const int32_t[::1] pair_rows, const int32_t[::1] pair_tokens):
    """float32[M]: logits[pair_rows[j], pair_tokens[j]]."""
    cdef Py_ssize_t M = pair_rows.shape[0], j
    if pair_tokens.shape[0] != M:
        raise ValueError(f"pair_rows has {M} entries but pair_tokens has {pair_tokens.shape[0]}")
    _check_range(pair_rows, logits.shape[0], "pair_rows")
    _check_range(pair_tokens, logits.shape[1], "pair_tokens")
    out = np.empty(M, dtype=np.float32)
    cdef float[::1] picked = out
    with nogil:
        for j in range(M):
            picked[j] = logits[pair_rows[j], pair_tokens[j]]
    return out


cdef _check_offsets(const int32_t[::1] offsets, Py_ssize_t total, str name):
    cdef Py_ssize_t i, bad = -1
    if offsets.shape[0] < 1 or offsets[0] != 0 or offsets[offsets.shape[0] - 1] != total:
        raise ValueError(f"{name} must run from 0 to {total}")
    with nogil:
        for i in range(1, offsets.shape[0]):
            if offsets[i] < offsets[i - 1]:
                bad = i
                break
    if bad >= 0:
        raise ValueError(f"{name} must be non-decreasing (at index {bad})")


cdef void _softmax(const double* x, double* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef double m = -INFINITY, s = 0.0
    for i in range(n):
        if x[i] > m:
            m = x[i]
    for i in range(n):
        p[i] = exp(x[i] - m)
        s += p[i]
    for i in range(n):
        p[i] /= s


def candidate_scores(const float[::1] pair_logits, const int32_t[::1] pair_rows, const double[::1] row_lse,
                     const int32_t[::1] cand_pair_offsets, const int32_t[::1] question_cand_offsets):
    """(loglik float64[C], probs float64[C]).

    loglik[c] = Σ (pair_logits[j] - row_lse[pair_rows[j]]) over c's pairs; probs = its softmax within each
    question. Where a row's lse was skipped (0), loglik is off by a constant per question that the softmax cancels.
    """
    cdef Py_ssize_t M = pair_logits.shape[0], C = cand_pair_offsets.shape[0] - 1
    cdef Py_ssize_t Q = question_cand_offsets.shape[0] - 1, c, j, q
    if pair_rows.shape[0] != M:
        raise ValueError(f"pair_logits has {M} entries but pair_rows has {pair_rows.shape[0]}")
    _check_offsets(cand_pair_offsets, M, "cand_pair_offsets")
    _check_offsets(question_cand_offsets, C, "question_cand_offsets")
    _check_range(pair_rows, row_lse.shape[0], "pair_rows")
    loglik_out = np.zeros(C, dtype=np.float64)
    probs_out = np.empty(C, dtype=np.float64)
    cdef double[::1] loglik = loglik_out, probs = probs_out
    cdef double total
    with nogil:
        for c in range(C):
            total = 0.0
            for j in range(cand_pair_offsets[c], cand_pair_offsets[c + 1]):
                total += <double>pair_logits[j] - row_lse[pair_rows[j]]
            loglik[c] = total
        for q in range(Q):
            if question_cand_offsets[q + 1] > question_cand_offsets[q]:
                _softmax(&loglik[question_cand_offsets[q]], &probs[question_cand_offsets[q]],
                         question_cand_offsets[q + 1] - question_cand_offsets[q])
    return loglik_out, probs_out
