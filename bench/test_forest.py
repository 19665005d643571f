"""Building the token forest and gathering log-probs: native code vs the pure-Python twin (no model).

Two shapes from the issue, on random token ids: one question with a 3,000-token prompt and 255
candidates of ~8 tokens, and 400 yes/no questions sharing a 2,000-token input. Each benchmark first
asserts that the native forest equals the twin's.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from decide import _native
from decide.scoring.forest import Forest, _pack, build_forest, offsets
from decide.scoring.forest_reference import build_forest_reference, scores_reference

VOCAB = 49152


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, VOCAB, n).tolist()


def choice255(rng: np.random.Generator):
    """One 3,000-token prompt; 255 candidates: opening quote, 1-3 tokens, closing quote, a 3-token ending."""
    prompt, ending = _tokens(rng, 3000), _tokens(rng, 3)
    cands = [[34, *_tokens(rng, int(rng.integers(1, 4))), 34, *ending] for _ in range(255)]
    return [prompt], [cands]


def yes_no400(rng: np.random.Generator):
    """400 prompts: a shared 20-token header and 2,000-token input, 40-80 question tokens, 5 closing tokens."""
    header, text, ending = _tokens(rng, 20), _tokens(rng, 2000), _tokens(rng, 3)
    prompts = [header + text + _tokens(rng, int(rng.integers(40, 80))) + _tokens(rng, 5) for _ in range(400)]
    yes, no = [34, *_tokens(rng, 1), 34, *ending], [34, *_tokens(rng, 1), 34, *ending]
    return prompts, [[yes, no] for _ in prompts]


SHAPES = {"choice255": (choice255, 2999), "yes_no400": (yes_no400, 2020)}
IMPLS = ("native", "native_core", "python")  # native_core: the C++ trie alone, inputs already packed
RUNS = [(shape, prefix, impl) for shape in SHAPES for prefix in ("cold", "warm") for impl in IMPLS]


def assert_same_forest(a: Forest, b: Forest) -> None:
    for f in fields(Forest):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert (x.tolist() == y.tolist()) if isinstance(x, np.ndarray) else x == y, f.name


def packed_arguments(prompts, cands, prefix_len: int) -> tuple:
    """What build_forest hands the C++ trie (the packing is the rest of build_forest's time)."""
    flat = [c for cs in cands for c in cs]
    return (*_pack(prompts), *_pack(flat), offsets([len(cs) for cs in cands]), prefix_len)


def requests(shape: str, prefix: str):
    make, cached = SHAPES[shape]
    prompts, cands = make(np.random.default_rng(0))
    return prompts, cands, (cached if prefix == "warm" else 0)


@pytest.mark.parametrize(("shape", "prefix", "impl"), RUNS, ids=["-".join(r) for r in RUNS])
def test_build_forest(benchmark, shape: str, prefix: str, impl: str) -> None:
    prompts, cands, prefix_len = requests(shape, prefix)
    native = build_forest(prompts, cands, prefix_len)
    assert_same_forest(native, build_forest_reference(prompts, cands, prefix_len))
    if impl == "native_core":
        packed = packed_arguments(prompts, cands, prefix_len)
        built = benchmark.pedantic(_native.build_forest, packed, rounds=10)
        assert built.tokens.tolist() == native.tokens.tolist()
    else:
        build = build_forest if impl == "native" else build_forest_reference
        benchmark.pedantic(build, (prompts, cands, prefix_len), rounds=10 if impl == "native" else 2)
    forest = native
    benchmark.group = f"forest {shape}"
    benchmark.extra_info.update(
        {"case": f"forest {shape} {prefix}", "path": impl, "nodes": forest.num_nodes, "rows": len(forest.rows)}
    )


@pytest.mark.parametrize("shape", list(SHAPES))
def test_gather(benchmark, shape: str) -> None:
    """Forest.scores on random logits at every needed row: log-sum-exps, picked logits, per-question softmax."""
    prompts, cands, prefix_len = requests(shape, "warm")
    forest = build_forest(prompts, cands, prefix_len)
    logits = np.random.default_rng(1).standard_normal((len(forest.rows), VOCAB)).astype(np.float32)
    want = scores_reference(forest, logits)
    got = benchmark.pedantic(forest.scores, (logits,), rounds=5)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-9)
    benchmark.group = f"forest {shape}"
    lse_rows = int(forest.row_needs_lse.sum())
    benchmark.extra_info.update(
        {"case": f"gather {shape}", "path": "native", "rows": len(forest.rows), "lse_rows": lse_rows}
    )
