"""The token forest: native trie == dict-of-children twin, the drawn example, edge cases, and the end-to-end
property that forest scoring (with the skipped normalizers) gives the naive per-candidate probabilities."""

from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import decide
from decide import _gather, _native
from decide.scoring.forest import Forest, ancestor_mask, build_forest
from decide.scoring.forest_reference import ancestor_mask_reference, build_forest_reference, scores_reference

BUILDERS = [build_forest, build_forest_reference]

VOCAB = 3  # few tokens, so prompts and candidates collide and prefix one another
token = st.integers(0, VOCAB - 1)
candidate = st.lists(token, min_size=1, max_size=5)


@st.composite
def forest_inputs(draw, max_questions: int = 4) -> tuple[list[list[int]], list[list[list[int]]], int]:
    """(prompts, candidates per question, prefix_len): prompts share a base, some repeat; 1-255 candidates each."""
    base = draw(st.lists(token, max_size=6))
    prompts: list[list[int]] = []
    for _ in range(draw(st.integers(1, max_questions))):
        if prompts and draw(st.booleans()):
            prompts.append(draw(st.sampled_from(prompts)))
        else:
            prompts.append(base + draw(st.lists(token, min_size=0 if base else 1, max_size=5)))
    prefix_len = draw(st.integers(0, min(len(base), *(len(p) - 1 for p in prompts))))
    counts = st.one_of(st.integers(1, 4), st.integers(1, 255))
    candidates = [draw(st.lists(candidate, min_size=n, max_size=n)) for n in [draw(counts) for _ in prompts]]
    return prompts, candidates, prefix_len


def assert_same_forest(a: Forest, b: Forest) -> None:
    for f in fields(Forest):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, f.name
            assert x.tolist() == y.tolist(), f.name
        else:
            assert x == y, f.name


def path_tokens(forest: Forest, node: int) -> list[int]:
    """Tokens from the cached prefix down to `node`, inclusive."""
    out = []
    while node >= 0:
        out.append(int(forest.tokens[node]))
        node = int(forest.parents[node])
    return out[::-1]


# --- the drawn example (Forest docstring) ----------------------------------------------------------------------------

EXAMPLE = dict(prompts=[[9, 1, 2], [9, 1, 3]], candidates=[[[4], [4, 5]], [[4], [6]]], prefix_len=1)
EXAMPLE_MASK = [
    [1, 0, 0, 0, 0, 0, 0],
    [1, 1, 0, 0, 0, 0, 0],
    [1, 1, 1, 0, 0, 0, 0],
    [1, 1, 1, 1, 0, 0, 0],
    [1, 0, 0, 0, 1, 0, 0],
    [1, 0, 0, 0, 1, 1, 0],
    [1, 0, 0, 0, 1, 0, 1],
]


@pytest.mark.parametrize("build", BUILDERS)
def test_drawn_example(build):
    f = build(**EXAMPLE)
    assert f.tokens.tolist() == [1, 2, 4, 5, 3, 4, 6]
    assert f.parents.tolist() == [-1, 0, 1, 2, 0, 4, 4]
    assert f.positions.tolist() == [1, 2, 3, 4, 2, 3, 3]
    assert f.rows.tolist() == [1, 2, 4]
    assert f.row_needs_lse.tolist() == [0, 1, 0]
    assert f.pair_rows.tolist() == [0, 0, 1, 2, 2]
    assert f.pair_tokens.tolist() == [4, 4, 5, 4, 6]
    assert f.cand_pair_offsets.tolist() == [0, 1, 3, 4, 5]
    assert f.prompt_last_nodes.tolist() == [1, 4]
    assert f.question_cand_offsets.tolist() == [0, 2, 4]
    assert (f.prefix_len, f.num_nodes, f.prompt_nodes, f.candidate_nodes) == (1, 7, 3, 4)
    for mask in (ancestor_mask, ancestor_mask_reference):
        assert mask(f.parents).astype(int).tolist() == EXAMPLE_MASK
        assert mask(f.parents, 2, 5).astype(int).tolist() == [row[:5] for row in EXAMPLE_MASK[2:5]]


def test_dtypes_and_read_only():
    f = build_forest(**EXAMPLE)
    assert f.tokens.dtype == np.int32 and f.row_needs_lse.dtype == np.uint8
    assert f.ancestor_mask().dtype == np.bool_
    with pytest.raises(ValueError):
        f.tokens[0] = 7


def test_native_arrays_outlive_the_call():
    tokens = build_forest(**EXAMPLE).tokens  # the Forest is gone; the array keeps its owner alive
    assert tokens.tolist() == [1, 2, 4, 5, 3, 4, 6]


# --- edge cases --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", BUILDERS)
def test_identical_prompts_and_duplicate_candidates_share_nodes(build):
    f = build([[5, 6], [5, 6]], [[[1, 2], [0]], [[1, 2]]])
    assert f.tokens.tolist() == [5, 6, 1, 2, 0]
    assert f.prompt_last_nodes.tolist() == [1, 1]
    # row 0 (node 6): q0 gathers there with both candidates, q1 with its only one; row 1 (node 1): q0's [1 2] only
    assert f.rows.tolist() == [1, 2]
    assert f.row_needs_lse.tolist() == [0, 1]
    assert (f.prompt_nodes, f.candidate_nodes) == (2, 3)


@pytest.mark.parametrize("build", BUILDERS)
def test_candidate_that_prefixes_another(build):
    f = build([[7]], [[[1], [1, 1], [1, 1, 1]]])
    assert f.tokens.tolist() == [7, 1, 1, 1]
    assert f.rows.tolist() == [0, 1, 2]
    assert f.row_needs_lse.tolist() == [0, 1, 1]
    assert f.pair_rows.tolist() == [0, 0, 1, 0, 1, 2]


@pytest.mark.parametrize("build", BUILDERS)
def test_a_prompt_may_run_through_another_questions_candidate(build):
    f = build([[7], [7, 1, 2]], [[[1, 2]], [[3]]])
    assert f.tokens.tolist() == [7, 1, 2, 3]
    assert f.prompt_last_nodes.tolist() == [0, 2]
    assert (f.prompt_nodes, f.candidate_nodes) == (3, 1)


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize(
    "prompts, candidates, prefix_len, message",
    [
        ([[1, 2]], [[[3], []]], 0, "empty"),
        ([[1, 2]], [[]], 0, "no candidates"),
        ([[1, 2], [1]], [[[3]], [[3]]], 1, "prefix_len"),
        ([[1, 2]], [[[3]]], 2, "prefix_len"),
        ([[1, 2]], [[[3]]], -1, "prefix_len"),
        ([[1, 2], [4, 2]], [[[3]], [[3]]], 1, "share"),
        ([[1, 2], [1, 3]], [[[3]]], 0, "candidates for"),
        ([], [], 0, "at least one prompt"),
    ],
)
def test_bad_input_is_a_value_error(build, prompts, candidates, prefix_len, message):
    with pytest.raises(ValueError, match=message):
        build(prompts, candidates, prefix_len)


def test_native_rejects_inconsistent_offsets():
    ok = dict(
        prompt_tokens=np.array([1, 2], np.int32),
        prompt_offsets=np.array([0, 2], np.int32),
        cand_tokens=np.array([3], np.int32),
        cand_offsets=np.array([0, 1], np.int32),
        question_cand_offsets=np.array([0, 1], np.int32),
    )
    assert _native.build_forest(**ok).num_nodes == 3
    for name, bad in [("prompt_offsets", [0, 3]), ("cand_offsets", [1, 1]), ("question_cand_offsets", [0, 1, 1])]:
        with pytest.raises(ValueError, match=name):
            _native.build_forest(**{**ok, name: np.array(bad, np.int32)})
    with pytest.raises(ValueError, match="parents"):
        _native.ancestor_mask(np.array([-1, 1], np.int32))
    with pytest.raises(ValueError, match="stop"):
        _native.ancestor_mask(np.array([-1, 0], np.int32), 0, 3)


# --- properties ----------------------------------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(forest_inputs())
def test_native_forest_equals_python_twin(inputs):
    prompts, candidates, prefix_len = inputs
    assert_same_forest(
        build_forest(prompts, candidates, prefix_len), build_forest_reference(prompts, candidates, prefix_len)
    )


@settings(max_examples=100, deadline=None)
@given(forest_inputs())
def test_forest_spells_every_sequence(inputs):
    """Independent of either twin: walking the pairs of candidate k of question q spells prompt_q + candidate_k."""
    prompts, candidates, prefix_len = inputs
    f = build_forest(prompts, candidates, prefix_len)
    assert all(f.parents < np.arange(f.num_nodes))
    assert f.rows.tolist() == sorted(set(f.rows.tolist()))
    depth_below = np.where(f.parents < 0, prefix_len - 1, f.positions[f.parents])
    assert (f.positions == depth_below + 1).all()
    c = 0
    for q, (prompt, cands) in enumerate(zip(prompts, candidates, strict=True)):
        assert path_tokens(f, int(f.prompt_last_nodes[q])) == list(prompt[prefix_len:])
        for cand in cands:
            nodes = f.rows[f.pair_rows[f.cand_pair_offsets[c] : f.cand_pair_offsets[c + 1]]]
            tokens = f.pair_tokens[f.cand_pair_offsets[c] : f.cand_pair_offsets[c + 1]]
            assert tokens.tolist() == cand
            assert nodes[0] == f.prompt_last_nodes[q]
            for parent, child, tok in zip(nodes[:-1], nodes[1:], tokens[:-1], strict=True):
                assert f.parents[child] == parent and f.tokens[child] == tok
            c += 1


@settings(max_examples=100, deadline=None)
@given(forest_inputs(max_questions=2), st.data())
def test_ancestor_mask_native_equals_twin(inputs, data):
    f = build_forest(*inputs)
    stop = data.draw(st.integers(0, f.num_nodes))
    start = data.draw(st.integers(0, stop))
    assert (ancestor_mask(f.parents, start, stop) == ancestor_mask_reference(f.parents, start, stop)).all()


class ContextLogits:
    """A fixed random float32 logits vector per context (the token sequence so far): a stand-in model."""

    def __init__(self, vocab: int, seed: int) -> None:
        self.vocab, self.rng, self.table = vocab, np.random.default_rng(seed), {}

    def __call__(self, context: list[int]) -> np.ndarray:
        key = tuple(context)
        if key not in self.table:
            self.table[key] = (self.rng.standard_normal(self.vocab) * 4).astype(np.float32)
        return self.table[key]


def naive_scores(model: ContextLogits, prompt: list[int], cands: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Full log-softmax (float64) at every candidate position, summed per candidate, softmaxed."""
    loglik = []
    for cand in cands:
        total = 0.0
        for t, tok in enumerate(cand):
            x = model(list(prompt) + cand[:t]).astype(np.float64)
            total += x[tok] - x.max() - np.log(np.exp(x - x.max()).sum())
        loglik.append(total)
    e = np.exp(np.array(loglik) - max(loglik))
    return np.array(loglik), e / e.sum()


@settings(max_examples=100, deadline=None)
@given(forest_inputs(max_questions=3), st.integers(0, 2**32 - 1), st.booleans())
def test_forest_probabilities_equal_naive(inputs, seed, reference):
    prompts, candidates, prefix_len = inputs
    model = ContextLogits(vocab=VOCAB + 4, seed=seed)
    f = (build_forest_reference if reference else build_forest)(prompts, candidates, prefix_len)
    cached = list(prompts[0][:prefix_len])
    logits = np.stack([model(cached + path_tokens(f, int(node))) for node in f.rows])
    loglik, probs = scores_reference(f, logits) if reference else f.scores(logits)
    for q, (prompt, cands) in enumerate(zip(prompts, candidates, strict=True)):
        a, b = f.question_cand_offsets[q], f.question_cand_offsets[q + 1]
        want_loglik, want_probs = naive_scores(model, prompt, cands)
        assert np.abs(probs[a:b] - want_probs).max() < 1e-9
        shift = loglik[a:b] - want_loglik  # a skipped normalizer shifts a whole question by one constant
        assert np.ptp(shift) < 1e-9


def test_versions_match_the_package():
    assert _native.__version__ == _gather.__version__ == decide.__version__, "stale build: rerun build_ext --inplace"
