"""decide: exact answers to typed questions (yes/no, choice, score) from a local chat model."""

__version__ = "0.1.0"

# The optimized BLAS must be loaded before anything imports mlx (decide/runtime.py says why).
from . import runtime as runtime  # noqa: E402
