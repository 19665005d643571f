"""The conversion cache: one mlx-lm folder per converted source, guarded by a manifest.

manifest.json is written last, atomically, and lists every file with its size, mtime and
sha256 (hashed right after conversion), plus the source's sha256. A folder without a valid
manifest is partial or corrupt: it is logged, deleted and rebuilt, never loaded. Later loads
check sizes and mtimes only, because hashing the 7 GB float32 cache of the 1.5B model takes
7 s warm and 19 s cold on a 2-core VM; a file whose mtime changed (e.g. a copied cache) is
re-hashed and accepted only if its sha256 still matches. `check_manifest(full=True)` hashes all.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
# Bump when the conversion output changes, so older caches are rebuilt.
CONVERTER_VERSION = 1
_REQUIRED = ("config.json", "tokenizer.json")


def default_cache_dir() -> Path:
    """$DECIDE_CACHE_DIR, else ~/.cache/decide/models (XDG_CACHE_HOME respected)."""
    if env := os.environ.get("DECIDE_CACHE_DIR"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "decide" / "models"


def sha256_file(path: Path, chunk: int = 8 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path, source_sha256: str, source: str) -> dict[str, Any]:
    """Hash every file in `folder` and write manifest.json atomically (tmp file + rename)."""
    files = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST):
        stat = path.stat()
        files[path.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}
    manifest = {
        "converter_version": CONVERTER_VERSION,
        "source": source,
        "source_sha256": source_sha256,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
    }
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, folder / MANIFEST)
    return manifest


def check_manifest(folder: Path, source_sha256: str | None = None, *, full: bool = False) -> str | None:
    """None if `folder` is a complete conversion, else the reason it is not."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return "missing its manifest (partial)" if folder.exists() else "missing"
    except (OSError, json.JSONDecodeError) as exc:
        return f"unreadable manifest ({exc})"
    if manifest.get("converter_version") != CONVERTER_VERSION:
        return f"from converter version {manifest.get('converter_version')}, not {CONVERTER_VERSION}"
    if source_sha256 is not None and manifest.get("source_sha256") != source_sha256:
        return "built from a different source"
    files = manifest.get("files") or {}
    if not all(name in files for name in _REQUIRED) or not any(n.endswith(".safetensors") for n in files):
        return "incomplete manifest"
    for name, entry in files.items():
        if reason := _check_file(folder / name, entry, full):
            return f"{name}: {reason}"
    return None


def _check_file(path: Path, entry: dict[str, Any], full: bool) -> str | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return "missing"
    if stat.st_size != entry.get("size"):
        return f"size {stat.st_size} != {entry.get('size')}"
    if (full or stat.st_mtime_ns != entry.get("mtime_ns")) and sha256_file(path) != entry.get("sha256"):
        return "sha256 mismatch"
    return None


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Exclusive lock so that two processes never convert into the same folder."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_converted(folder: Path, source_sha256: str | None, build: Callable[[Path], str], source: str) -> bool:
    """Make `folder` a verified conversion of `source`; return True if it had to be (re)built.

    `build(folder)` fills the empty folder and returns the source's sha256 (it may only know
    it after reading the source), which the manifest records. A failed build leaves nothing.
    """
    if check_manifest(folder, source_sha256) is None:
        return False
    with _locked(folder):
        reason = check_manifest(folder, source_sha256)
        if reason is None:  # another process finished it while we waited
            return False
        if folder.exists():
            log.warning("model cache %s is %s: rebuilding it", folder, reason)
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        try:
            sha = build(folder)
            write_manifest(folder, sha, source)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return True
