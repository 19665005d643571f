"""Keep a long-running worker's memory flat: cap MLX's buffer cache and tame glibc's malloc.

With glibc's defaults a worker's RSS creeps: each thread may get its own malloc arena, and the
dynamic mmap threshold rises until freed MLX buffers stay in the heap instead of going back to
the system. Few arenas and always-mmapped large blocks keep it flat.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("decide.server")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8


def cap_mlx_cache(limit_bytes: int) -> None:
    """Bound MLX's buffer cache: freed buffers beyond it go back to the allocator."""
    from ..runtime import mx

    mx.set_cache_limit(limit_bytes)


def tame_malloc(arenas: int = 2, mmap_threshold: int = 128 << 10, trim_threshold: int = 1 << 20) -> bool:
    """Few malloc arenas; large blocks always mmapped (so freeing them returns them to the system).
    Best called before the worker starts its threads. False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    ok = all(mallopt(p, v) == 1 for p, v in [(_M_ARENA_MAX, arenas), (_M_MMAP_THRESHOLD, mmap_threshold),
                                            (_M_TRIM_THRESHOLD, trim_threshold)])  # fmt: skip
    if not ok:
        log.warning("mallopt refused a setting; memory may grow with the number of threads")
    return ok
