"""load_model: a spec in, a ready mlx-lm model with its ChatTokenizer out."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decide import bf16, int8, runtime
from decide.errors import ModelLoadError
from decide.limits import CONTEXT_CAP
from decide.models.sources import resolve
from decide.models.tokenizer import ChatTokenizer
from decide.runtime import mx

log = logging.getLogger(__name__)

_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")


@dataclass
class LoadedModel:
    """A model ready to score: `model(tokens[B, L] int32, cache=[KVCache per layer]) -> logits[B, L, V]`."""

    model_id: str
    model: Any = field(repr=False)  # an mlx_lm.models.<type>.Model
    tokenizer: ChatTokenizer = field(repr=False)
    context_length: int
    dtype: str
    device: str
    blas: str
    precision: str  # of the weights and GEMMs: float32 (or the GPU dtype), bfloat16 or int8 (decide.bf16)
    backend: str  # what runs the linear layers: mlx (GPU), blas (CPU float32), onednn (CPU bfloat16, int8)
    source: str  # the mlx-lm folder the weights were loaded from
    load_seconds: float
    supports_images: bool = False
    config: dict[str, Any] = field(default_factory=dict, repr=False)


def load_model(
    spec: str | None = None,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    precision: str | None = None,
) -> LoadedModel:
    """Load `spec`: an embedded alias, an mlx-lm folder, a .gguf file or a locally cached HF repo id.

    None means $DECIDE_MODEL, else "qwen2.5-coder-1.5b". GGUF sources are converted once into
    the cache (`cache_dir`, else $DECIDE_CACHE_DIR, else ~/.cache/decide/models).
    `precision`: auto | float32 | bfloat16 | int8 (None: $DECIDE_PRECISION, else auto; see decide.bf16).
    Raises ModelNotFound (nothing to load; the message says what to do) or ModelLoadError.
    """
    try:
        precision = bf16.resolve_precision(precision)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from exc
    start = time.perf_counter()
    resolved = resolve(spec, cache_dir=cache_dir, progress=progress)
    if resolved.converted:
        log.info("converted %s into %s in %.1f s", resolved.source, resolved.folder, time.perf_counter() - start)
    dtype = runtime.compute_dtype()
    tokenizer = ChatTokenizer.from_folder(resolved.folder)
    model, config = build_model(resolved.folder, dtype, precision, tokenizer)
    loaded = LoadedModel(
        model_id=resolved.model_id,
        model=model,
        tokenizer=tokenizer,
        context_length=context_length(config, resolved.folder),
        dtype=str(dtype).removeprefix("mlx.core."),
        device=runtime.device(),
        blas=runtime.BLAS,
        precision=precision if precision in bf16.ONEDNN_PRECISIONS else str(dtype).removeprefix("mlx.core."),
        backend="onednn" if precision in bf16.ONEDNN_PRECISIONS else ("blas" if runtime.device() == "cpu" else "mlx"),
        source=str(resolved.folder),
        load_seconds=time.perf_counter() - start,
        config=config,
    )
    log.info(
        "loaded %s (%s, %s weights through %s on %s, context %d) in %.1f s; BLAS: %s",
        loaded.model_id,
        config.get("model_type"),
        loaded.precision,
        loaded.backend,
        loaded.device,
        loaded.context_length,
        loaded.load_seconds,
        loaded.blas,
    )
    return loaded


def build_model(
    folder: Path, dtype: mx.Dtype, precision: str = "float32", tokenizer: ChatTokenizer | None = None
) -> tuple[Any, dict[str, Any]]:
    """Build mlx-lm's own model class for `folder` with weights cast to `dtype`; with precision
    bfloat16 (or int8) its linear layers and embedding then become decide.bf16's, one weight at a time
    (at int8, then requantized by decide.int8 after a calibration pass rendered with `tokenizer`,
    the folder's own if None)."""
    from mlx_lm.utils import load_model as mlx_lm_load_model  # after decide.runtime: BLAS first

    try:
        model, config = mlx_lm_load_model(Path(folder), lazy=True)
    except (FileNotFoundError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"cannot build the model in {folder}: {exc}") from exc
    model.set_dtype(dtype)
    if precision in bf16.ONEDNN_PRECISIONS:
        bf16.convert(model)
    mx.eval(model.parameters())
    if precision == "int8":
        int8.quantize(model, int8.calibration_prompts(tokenizer or ChatTokenizer.from_folder(folder)))
    return model, config


def context_length(config: dict[str, Any], folder: Path) -> int:
    """The model's context window from its config, capped at CONTEXT_CAP."""
    for source in (config, config.get("text_config") or {}):
        for key in _CONTEXT_KEYS:
            if isinstance(source.get(key), int) and source[key] > 0:
                return min(source[key], CONTEXT_CAP)
    log.warning("%s states no context length; assuming 4096 tokens", folder)
    return 4096
