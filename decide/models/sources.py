"""Model specs -> an mlx-lm folder ready to load, converting GGUF sources into the cache.

A spec is an embedded alias, a path (an mlx-lm folder, a .gguf file, or a folder holding one
.gguf), or a Hugging Face repo id already in the local HF cache (no download: offline).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from decide.errors import ModelNotFound
from decide.models.cache import default_cache_dir, ensure_converted, sha256_file
from decide.models.embedded import EMBEDDED, convert_embedded
from decide.models.gguf_convert import convert_gguf

DEFAULT_MODEL = "qwen2.5-coder-1.5b"
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class ResolvedModel:
    model_id: str  # the id decide serves: alias, folder or file name, or repo id
    folder: Path  # an mlx-lm folder (config.json, safetensors, tokenizer.json)
    source: str  # what the folder was made from
    converted: bool  # True if this call wrote the folder


def resolve(spec: str | None = None, *, cache_dir: str | Path | None = None, progress: bool = True) -> ResolvedModel:
    """Find (and convert, once) the model named by `spec`; None means $DECIDE_MODEL or the default."""
    spec = spec or os.environ.get("DECIDE_MODEL") or DEFAULT_MODEL
    cache_root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if spec in EMBEDDED:
        return _embedded(spec, cache_root, progress)
    path = Path(spec).expanduser()
    if path.exists():
        return _local(path, None, cache_root, progress)
    if spec.startswith(("/", "./", "../", "~")) or spec.lower().endswith(".gguf"):
        raise ModelNotFound(f"{spec}: no such file or folder")
    if _REPO_ID.fullmatch(spec):
        return _hf_cached(spec, cache_root, progress)
    raise ModelNotFound(
        f"unknown model {spec!r}: not an embedded alias ({', '.join(EMBEDDED)}), not an existing path "
        "(an mlx-lm model folder or a .gguf file), and not a Hugging Face repo id (org/name)"
    )


def embedded_folder(alias: str, cache_root: Path) -> Path:
    """Where the conversion of an embedded model lives in the cache."""
    return cache_root / f"{alias}-{EMBEDDED[alias].sha256[:12]}"


def _embedded(alias: str, cache_root: Path, progress: bool) -> ResolvedModel:
    model = EMBEDDED[alias]
    folder = embedded_folder(alias, cache_root)
    converted = ensure_converted(
        folder, model.sha256, lambda dest: convert_embedded(model, dest, progress=progress), source=alias
    )
    return ResolvedModel(alias, folder, alias, converted)


def _local(path: Path, model_id: str | None, cache_root: Path, progress: bool) -> ResolvedModel:
    if path.is_dir():
        if (path / "config.json").is_file():
            return ResolvedModel(model_id or path.resolve().name, path, str(path), False)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return _gguf(ggufs[0], model_id or path.resolve().name, cache_root, progress)
        raise ModelNotFound(
            f"{path} is not a model folder: expected config.json + *.safetensors + tokenizer.json "
            f"(mlx-lm layout) or exactly one .gguf file (found {len(ggufs)})"
        )
    if path.suffix.lower() == ".gguf" or _is_gguf(path):
        return _gguf(path, model_id or path.stem, cache_root, progress)
    raise ModelNotFound(f"{path} is neither a GGUF file nor an mlx-lm model folder")


def _is_gguf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"GGUF"


def _gguf(path: Path, model_id: str, cache_root: Path, progress: bool) -> ResolvedModel:
    # The cache key is the file's identity (path, size, mtime), so a later load does not hash
    # a gigabyte; the manifest still records the content's sha256.
    path = path.resolve()
    stat = path.stat()
    key = hashlib.sha256(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    folder = cache_root / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', path.stem)}-{key}"

    def build(dest: Path) -> str:
        convert_gguf(path, dest, progress=progress)
        return sha256_file(path)

    converted = ensure_converted(folder, None, build, source=str(path))
    return ResolvedModel(model_id, folder, str(path), converted)


def hf_hub_cache() -> Path:
    """The local Hugging Face hub cache, as huggingface_hub locates it."""
    if env := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "huggingface" / "hub"


def _hf_snapshot(repo_id: str) -> Path | None:
    repo = hf_hub_cache() / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    if ref.is_file() and (snapshot := repo / "snapshots" / ref.read_text().strip()).is_dir():
        return snapshot
    snapshots = sorted((repo / "snapshots").glob("*/"), key=lambda p: p.stat().st_mtime)
    return snapshots[-1] if snapshots else None


def _hf_cached(repo_id: str, cache_root: Path, progress: bool) -> ResolvedModel:
    snapshot = _hf_snapshot(repo_id)
    if snapshot is None:
        raise ModelNotFound(
            f"{repo_id!r} is not in the local Hugging Face cache ({hf_hub_cache()}) and decide does not "
            f"download models. On a machine with hub access run `huggingface-cli download {repo_id}` and copy "
            "the cache here (or point HF_HUB_CACHE at it), or pass a local model folder or .gguf path; "
            f"embedded models: {', '.join(EMBEDDED)}"
        )
    return _local(snapshot, repo_id, cache_root, progress)
