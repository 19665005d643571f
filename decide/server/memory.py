"""Keep a long-running worker's memory flat: cap MLX's buffer cache and tame glibc's malloc.

With glibc's defaults a worker's RSS creeps: each thread may get its own malloc arena. Two
arenas keep it flat. Large blocks are NOT forced to mmap (a fixed 128 KiB mmap threshold and a
1 MiB trim threshold): every activation buffer then came fresh from the kernel, page faults and
zeroing included, which cost 0.24 s of a 0.36 s request on SmolLM2 (`python -m bench.overhead`)
to save ~40 MiB of heap that glibc keeps for reuse.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("decide.server")

_M_ARENA_MAX = -8


def cap_mlx_cache(limit_bytes: int) -> None:
    """Bound MLX's buffer cache: freed buffers beyond it go back to the allocator."""
    from ..runtime import mx

    mx.set_cache_limit(limit_bytes)


def tame_malloc(arenas: int = 2) -> bool:
    """Few malloc arenas. Best called before the worker starts its threads. False where the C library is not
    glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    ok = mallopt(_M_ARENA_MAX, arenas) == 1
    if not ok:
        log.warning("mallopt refused a setting; memory may grow with the number of threads")
    return ok
