"""Kernel backends: which function serves each op of a forest pass, chosen once when a model loads.

| backend        | attention          | silu · up           | rope (per token) | linear layers              |
|----------------|--------------------|---------------------|------------------|----------------------------|
| `mlx`          | stock_attention    | stock_silu_product  | stock_rope       | MLX (the model's own)      |
| `cpu-float32`  | native_attention * | native_silu_product | RopeTables       | MLX on the loaded BLAS     |
| `cpu-bfloat16` | bf16_attention *   | native_silu_product | RopeTables       | decide.bf16 (oneDNN bf16 or int8) |

(*: `mlx_attention` where no optimized BLAS was loaded, which the native attention kernel needs.)
`cpu-bfloat16` also runs a SwiGLU MLP whole on numpy buffers (`kernels.onednn_mlp`: its GEMMs and
silu · up with no MLX array between; 2–4% of a request, measured at int8).

`mlx` is the reference and the path for Metal and CUDA. The linear layers are not swapped per pass:
`decide.bf16.convert` replaces them when the model loads in bfloat16 or int8; the column only records it.
Adding a backend for a new device is one row here (its kernels in kernels.py) and a line in `choose`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ... import _native, bf16
from . import kernels


@dataclass(frozen=True)
class Backend:
    name: str
    attention: Callable  # (queries, keys, values, scale, mask, shared) -> out, see kernels.py
    silu_product: Callable  # (gate, up) -> silu(gate) * up
    rope: Callable  # (rope module, x [B, H, L, D], positions int[L]) -> x rotated
    linear: str  # what runs the linear layers (set at load, not per pass)
    mlp: Callable | None = None  # (SwiGLU mlp, y) -> its output; None: its linear layers around silu_product


def _cpu(
    name: str, linear: str, attention: Callable = kernels.native_attention, mlp: Callable | None = None
) -> Backend:
    attention = attention if _native.attention_available() else kernels.mlx_attention
    return Backend(name, attention, kernels.native_silu_product, kernels.RopeTables(), linear, mlp)


def mlx() -> Backend:
    return Backend("mlx", kernels.stock_attention, kernels.stock_silu_product, kernels.stock_rope, "mlx")


def cpu_float32() -> Backend:
    return _cpu("cpu-float32", "mlx-blas")


def cpu_bfloat16() -> Backend:
    return _cpu("cpu-bfloat16", "onednn-bf16", kernels.bf16_attention, kernels.onednn_mlp)


BACKENDS: dict[str, Callable[[], Backend]] = {"mlx": mlx, "cpu-float32": cpu_float32, "cpu-bfloat16": cpu_bfloat16}


def choose(device: str, dtype: str, precision: str, requested: str | None = None) -> Backend:
    """The backend for a model on `device` computing in `dtype` at `precision`; `requested` names one
    ("auto" or None: the fastest that fits). Raises ValueError for an unknown or unfitting name."""
    fits = {"mlx"}
    if device == "cpu" and dtype == "float32":
        fits.add("cpu-bfloat16" if precision in bf16.ONEDNN_PRECISIONS else "cpu-float32")
    if requested in (None, "auto"):
        requested = next((name for name in ("cpu-bfloat16", "cpu-float32") if name in fits), "mlx")
    if requested not in BACKENDS:
        raise ValueError(f"unknown kernel backend {requested!r}: use auto or one of {', '.join(BACKENDS)}")
    if requested not in fits:
        raise ValueError(
            f"kernel backend {requested} does not fit a {precision} model on {device}: use one of {', '.join(fits)}"
        )
    return BACKENDS[requested]()
