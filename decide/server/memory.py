"""Keep a long-running worker's memory flat and its large buffers warm: cap MLX's buffer cache, tame glibc's malloc.

With glibc's defaults a worker's RSS creeps: each thread may get its own malloc arena. Two
arenas keep it flat. And glibc serves a block above its mmap threshold (at most 32 MiB, raised
as such blocks are freed) by a fresh mmap and unmaps it on free: every such activation buffer
comes from the kernel anew, page faults and zeroing included. A forward's buffers are larger than
that on the 1.5B model (8 TREC questions in one pass: 1,280 rows × 8,960 floats = 46 MB per MLP
projection): `decide eval` spent 26 s of 61 in the kernel on 24 of them, 8 s with blocks up to
1 GiB kept in the heap (wall 61 → 42 s). So blocks below 1 GiB come from the heap, and freed
memory stays there for the next pass (RSS stays at the peak of a pass instead of falling after it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("decide.server")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
HEAP_BLOCKS_BELOW = 1 << 30


def cap_mlx_cache(limit_bytes: int) -> None:
    """Bound MLX's buffer cache: freed buffers beyond it go back to the allocator."""
    from ..runtime import mx

    mx.set_cache_limit(limit_bytes)


def tame_malloc(arenas: int = 2, heap_blocks_below: int = HEAP_BLOCKS_BELOW) -> bool:
    """Few malloc arenas; blocks below `heap_blocks_below` bytes from the heap, and freed memory kept there up to
    that much. Best called before the process starts its threads. False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    settings = ((_M_ARENA_MAX, arenas), (_M_MMAP_THRESHOLD, heap_blocks_below), (_M_TRIM_THRESHOLD, heap_blocks_below))
    ok = all(mallopt(option, ctypes.c_int(value)) == 1 for option, value in settings)
    if not ok:
        log.warning(
            "mallopt refused a setting; memory may grow with the number of threads, or large buffers be mapped anew"
        )
    return ok
