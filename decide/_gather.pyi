"""Native log-prob gather over a forest's logits rows (csrc/gather.pyx). Use decide.scoring.forest."""

import numpy as np
import numpy.typing as npt

__version__: str

def row_logsumexp(logits: npt.NDArray[np.float32], needed: npt.NDArray[np.uint8]) -> npt.NDArray[np.float64]:
    """float64[R]: logsumexp of each C-contiguous float32 row where needed[r], else 0."""

def pair_logits(
    logits: npt.NDArray[np.float32], pair_rows: npt.NDArray[np.int32], pair_tokens: npt.NDArray[np.int32]
) -> npt.NDArray[np.float32]:
    """float32[M]: logits[pair_rows[j], pair_tokens[j]]; IndexError when a row or token is out of range."""

def candidate_scores(
    pair_logits: npt.NDArray[np.float32],
    pair_rows: npt.NDArray[np.int32],
    row_lse: npt.NDArray[np.float64],
    cand_pair_offsets: npt.NDArray[np.int32],
    question_cand_offsets: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(loglik float64[C], probs float64[C]): per-candidate Σ (pair_logit - row_lse), softmax per question."""
