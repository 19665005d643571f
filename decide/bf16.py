"""The bfloat16 CPU backend: a model's linear layers as oneDNN bf16 GEMMs (csrc/bf16_linear.cpp).

`convert(model)` replaces every float32 `nn.Linear` and the token embedding of an mlx-lm model
with modules that hold their weight once, as bfloat16, in oneDNN's memory (the float32 arrays are
dropped; sibling projections of one input become one GEMM), and its `nn.RMSNorm`s with a native one. They take and return float32: each call rounds its input to bf16 and oneDNN
accumulates in float32, so norms, RoPE, attention, SwiGLU and the head's log-softmax stay float32.

`resolve_precision` turns `auto | float32 | bfloat16 | int8` into the precision that serves: `auto` is
bfloat16 only on a CPU with native bf16 (avx512_bf16 or amx_bf16) where the backend loads. It never
picks int8 (decide.int8: this backend with W8A8 linear layers), which moves answers more.
Where oneDNN has no bf16 GEMMs for the CPU (AVX2 only), the same bf16-rounded operands run as
float32 GEMMs (a product of two bf16 values is exact in float32): the same answers, slower, so
the path is tested on any x86-64 CPU; `auto` never picks it.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import logging
import os
import sys
from pathlib import Path
from typing import Literal

import mlx.nn as nn
import numpy as np

from .runtime import device, mx

log = logging.getLogger(__name__)

Precision = Literal["auto", "float32", "bfloat16", "int8"]
PRECISIONS: tuple[str, ...] = ("auto", "float32", "bfloat16", "int8")
ONEDNN_PRECISIONS = ("bfloat16", "int8")  # served by this backend
PRECISION_HELP = (  # the CLI's --precision
    "weights and matmuls: bfloat16 or int8 (CPU, oneDNN) or float32; auto = bfloat16 where the CPU has native bf16 "
    "(default: $DECIDE_PRECISION or auto)"
)
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_ONEDNN_DIST = "onednn-cpu-gomp"


def _libdnnl_paths() -> list[Path]:
    paths = []
    try:
        dist = importlib.metadata.distribution(_ONEDNN_DIST)
        paths += [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name == "libdnnl.so.3"]
    except importlib.metadata.PackageNotFoundError:
        pass
    return [*paths, Path(sys.prefix, "lib", "libdnnl.so.3")]


@functools.cache
def _native():
    """decide._onednn with its libdnnl loaded first (the wheel's lib/ is on no loader path); None if absent."""
    # oneDNN's OpenMP threads spin after each GEMM waiting for the next; they would hold the cores that
    # the native attention and OpenBLAS need between GEMMs (measured: attention 2x slower). Read when
    # libgomp loads, which is here.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        path = next((p for p in _libdnnl_paths() if p.exists()), None)
        if path is not None:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        from . import _onednn
    except (ImportError, OSError) as exc:  # not built, not installed, or libgomp missing
        log.debug("the bfloat16 backend is not available: %s", exc)
        return None
    return _onednn


def available() -> bool:
    """True when the oneDNN backend loads (built with onednn-devel-cpu-gomp, onednn-cpu-gomp installed)."""
    return _native() is not None


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str]:
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """True when the CPU multiplies bf16 natively (where bf16 GEMMs beat float32 ones)."""
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in NATIVE_BF16_FLAGS)


def resolve_precision(requested: str | None = None) -> str:
    """The precision that serves: `requested`, else $DECIDE_PRECISION, else auto. Raises ValueError
    for an unknown name, or for bfloat16 or int8 where the backend cannot run (not a CPU, or oneDNN absent)."""
    requested = (requested or os.environ.get("DECIDE_PRECISION") or "auto").strip().lower()
    if requested not in PRECISIONS:
        raise ValueError(f"unknown precision {requested!r}: use one of {', '.join(PRECISIONS)}")
    if requested == "float32":
        return requested
    runs = device() == "cpu" and available()
    if requested == "auto":
        return "bfloat16" if runs and native_bf16() else "float32"
    if not runs:
        why = "MLX runs on a GPU here" if device() != "cpu" else "oneDNN is not installed (pip install onednn-cpu-gomp)"
        raise ValueError(f"precision {requested} needs the CPU oneDNN backend: {why}")
    if not _native().has_bf16_kernels():
        log.warning(
            "precision %s on a CPU without oneDNN bf16 kernels (it needs AVX-512 or AMX): its bf16-rounded "
            "operands run as float32 GEMMs, slower than precision float32",
            requested,
        )
    return requested


def _float32(a: mx.array) -> np.ndarray:
    return np.asarray(a.astype(mx.float32) if a.dtype != mx.float32 else a)


class Bf16Linear(nn.Module):
    """`nn.Linear` with its weight held as bfloat16 by oneDNN (`gemm`, a decide._onednn.Bf16Linear; an
    Int8Linear once decide.int8 requantizes it); float32 in, float32 out."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.host_bias = _float32(linear.bias) if "bias" in linear else None  # kept for decide.int8
        self.gemm = _native().Bf16Linear(_float32(linear.weight), self.host_bias)

    @property
    def nbytes(self) -> int:
        return self.gemm.weight_bytes

    def __call__(self, x: mx.array) -> mx.array:
        return _apply(self.gemm, x)


class Bf16Embedding(nn.Module):
    """`nn.Embedding` held once as bfloat16 rows: looked up and widened to float32, and multiplied
    by through oneDNN as a tied head (`as_linear`)."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self._table = _native().Bf16Linear(_float32(embedding.weight), packed=False)

    @property
    def nbytes(self) -> int:
        return self._table.weight_bytes

    def __call__(self, ids: mx.array) -> mx.array:
        return mx.array(self._table.rows(np.asarray(ids, dtype=np.int64)))

    def as_linear(self, x: mx.array) -> mx.array:
        return _apply(self._table, x)


class NativeRMSNorm(nn.Module):
    """`nn.RMSNorm` in float32 through csrc/rms_norm.cpp (MLX's CPU rms_norm is ~4x slower)."""

    def __init__(self, norm: nn.RMSNorm) -> None:
        super().__init__()
        self._weight, self._eps = _float32(norm.weight), float(norm.eps)

    nbytes = 0  # a vector, not a weight matrix

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32:
            x = x.astype(mx.float32)
        mx.eval(x)
        return mx.array(_native().rms_norm(np.asarray(x), self._weight, self._eps))


def _apply(gemm, x: mx.array) -> mx.array:
    if x.dtype != mx.float32:
        x = x.astype(mx.float32)
    mx.eval(x)
    return mx.array(gemm(np.asarray(x)))


# Sibling projections that read one input: each group becomes one GEMM (one input rounding, one call,
# and wide: k/v alone are 192 outputs on SmolLM2, where oneDNN runs at ~75% of its speed at 960).
# Not gate/up: at 3,072 outputs oneDNN's GEMM measured no faster than two of 1,536, and the split costs a copy.
FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"),)


class FusedLinears:
    """Linear layers of one input as one bf16 GEMM of their stacked weights: the first member called
    with an input computes every member's output; the others take theirs (then it is let go)."""

    def __init__(self, linears: list[nn.Linear]) -> None:
        weight = np.concatenate([_float32(lin.weight) for lin in linears])
        biased = any("bias" in lin for lin in linears)
        self.host_bias = np.concatenate([_float32(_bias(lin)) for lin in linears]) if biased else None
        self.gemm = _native().Bf16Linear(weight, self.host_bias)
        self.bounds = np.cumsum([0] + [lin.weight.shape[0] for lin in linears]).tolist()
        self._input: mx.array | None = None
        self._outputs: dict[int, mx.array] = {}

    def output(self, x: mx.array, member: int) -> mx.array:
        if self._input is not x or member not in self._outputs:
            if x.dtype != mx.float32:
                x = x.astype(mx.float32)
            mx.eval(x)
            y = self.gemm(np.asarray(x))
            self._input = x
            self._outputs = {i: mx.array(y[..., a:b]) for i, (a, b) in enumerate(zip(self.bounds, self.bounds[1:]))}
        out = self._outputs.pop(member)
        if not self._outputs:
            self._input = None
        return out


def _bias(linear: nn.Linear) -> mx.array:
    return linear.bias if "bias" in linear else mx.zeros((linear.weight.shape[0],), mx.float32)


class Bf16FusedMember(nn.Module):
    """One member of a FusedLinears group, called as the nn.Linear it replaces."""

    def __init__(self, fused: FusedLinears, member: int) -> None:
        super().__init__()
        self._fused, self._member = fused, member

    @property
    def nbytes(self) -> int:
        return self._fused.gemm.weight_bytes if self._member == 0 else 0

    def __call__(self, x: mx.array) -> mx.array:
        return self._fused.output(x, self._member)


def _fuse(module: nn.Module) -> int:
    """Replace each complete group of FUSED_GROUPS among `module`'s plain linear children; the bytes held."""
    held = 0
    for names in FUSED_GROUPS:
        linears = [module.get(name) for name in names]
        if not all(_plain(lin, nn.Linear) for lin in linears) or len({lin.weight.shape[1] for lin in linears}) > 1:
            continue
        fused = FusedLinears(linears)
        for i, name in enumerate(names):
            module[name] = Bf16FusedMember(fused, i)
            held += module[name].nbytes
        mx.clear_cache()
    return held


def convert(model: nn.Module) -> int:
    """Swap every float32 nn.Linear / nn.Embedding of `model` for its bf16 twin (sibling projections
    fused, FUSED_GROUPS), one module at a time, so that a lazily loaded model never holds all its
    float32 weights; returns the bf16 bytes held."""
    held = 0
    for module in _parents(model):
        held += _fuse(module)
        for key in list(module.keys()):
            slots = list(range(len(module[key]))) if isinstance(module[key], list) else [None]
            for i in slots:
                container = module if i is None else module[key]
                twin = _twin(container[key if i is None else i])
                if twin is not None:
                    container[key if i is None else i] = twin
                    held += twin.nbytes
                    mx.clear_cache()  # the float32 weight just freed; MLX would keep it for reuse
    return held


def _parents(model: nn.Module) -> list[nn.Module]:
    """The modules with a child or a list of children (the leaves themselves are not held)."""
    return [m for _, m in model.named_modules() if any(isinstance(v, (nn.Module, list)) for v in m.values())]


def _plain(leaf, kind: type) -> bool:
    """`leaf` is exactly a `kind` (not a quantized subclass) with float weights."""
    return type(leaf) is kind and leaf.weight.dtype in (mx.float32, mx.float16, mx.bfloat16)


def _twin(leaf) -> nn.Module | None:
    if _plain(leaf, nn.Linear):
        return Bf16Linear(leaf)
    if _plain(leaf, nn.Embedding):
        return Bf16Embedding(leaf)
    if _plain(leaf, nn.RMSNorm):
        return NativeRMSNorm(leaf)
    return None
