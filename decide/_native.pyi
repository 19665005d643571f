"""Native core of decide: the token forest of a request (csrc/trie.cpp; use decide.scoring.forest) and CPU
kernels (csrc/kernels.cpp; use decide.scoring.adapter.kernels)."""

import numpy as np
import numpy.typing as npt

__version__: str

class Forest:
    """A packed token forest; array attributes are views owned by the Forest."""

    @property
    def prefix_len(self) -> int: ...
    @property
    def tokens(self) -> npt.NDArray[np.int32]: ...
    @property
    def parents(self) -> npt.NDArray[np.int32]: ...
    @property
    def positions(self) -> npt.NDArray[np.int32]: ...
    @property
    def rows(self) -> npt.NDArray[np.int32]: ...
    @property
    def row_needs_lse(self) -> npt.NDArray[np.uint8]: ...
    @property
    def pair_rows(self) -> npt.NDArray[np.int32]: ...
    @property
    def pair_tokens(self) -> npt.NDArray[np.int32]: ...
    @property
    def cand_pair_offsets(self) -> npt.NDArray[np.int32]: ...
    @property
    def prompt_last_nodes(self) -> npt.NDArray[np.int32]: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def prompt_nodes(self) -> int: ...
    @property
    def candidate_nodes(self) -> int: ...

def build_forest(
    prompt_tokens: npt.ArrayLike,
    prompt_offsets: npt.ArrayLike,
    cand_tokens: npt.ArrayLike,
    cand_offsets: npt.ArrayLike,
    question_cand_offsets: npt.ArrayLike,
    prefix_len: int = 0,
) -> Forest:
    """Build the forest of Q prompts and their candidates (CSR int32 arrays); ValueError on malformed input."""

def ancestor_mask(parents: npt.ArrayLike, start: int = 0, stop: int | None = None) -> npt.NDArray[np.bool_]:
    """bool[stop - start, stop]: mask[i - start, j] = node j is an ancestor-or-self of node i."""

def attention_available() -> bool:
    """True when a cblas_sgemm is in the process's global symbol scope (decide.runtime loaded a BLAS)."""

def attention(
    q: npt.NDArray[np.float32],
    k: npt.NDArray[np.float32],
    v: npt.NDArray[np.float32],
    scale: float,
    bias: npt.NDArray[np.float32] | None,
    causal_offset: int = 0,
    shared: int = 0,
) -> npt.NDArray[np.float32]:
    """softmax(q kᵀ · scale + mask) v for one sequence: q [heads, length, dim], k and v [kv_heads, span, dim];
    mask = bias [length, span] (0 / -inf; keys [0, shared) are seen by every query), or with bias None causal
    (query i sees keys j <= i + causal_offset). A query's result depends only on the keys it sees (with a bias)."""

def silu_product(gate: npt.NDArray[np.float32], up: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """silu(gate) * up elementwise (C-contiguous float32 arrays of one shape)."""

def rope(
    x: npt.NDArray[np.float32],
    cos: npt.NDArray[np.float32],
    sin: npt.NDArray[np.float32],
    dims: int,
    traditional: bool,
) -> npt.NDArray[np.float32]:
    """x [heads, length, dim] (contiguous last axis) with the first `dims` features of row i rotated by row i of
    cos and sin [length, dims / 2]: pairs (j, j + dims / 2), or (2j, 2j + 1) when traditional. A contiguous copy."""
